"""RLlib's IMPALA in Rust, with RLlib's Python API.

    from impala_rs import IMPALAConfig

    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(lr=0.0003, train_batch_size_per_learner=512)
        .learners(num_learners=1)
    )
    algo = config.build()
    print(algo.train()["episode_return_mean"])
    algo.stop()

Envs: the native classic-control ids, any Gymnasium id, an entry point
``"package.module:Name"``, a ``gymnasium.Env`` subclass or creator passed to
``.environment(...)``, or a name given to :func:`register_env`. Python envs are stepped in env
worker processes, never in this interpreter. Models: RLlib's catalog (``model`` options),
``"impala_resnet"``, a TorchScript file, or a ``torch.nn.Module`` class passed as
``model={"custom_model": cls}`` or named with :func:`register_custom_model`. Trained policies:
``algo.compute_single_action(obs)``, ``algo.get_policy()``, or :meth:`Policy.from_checkpoint`
without an algorithm; videos of it playing: :func:`record_video` (or
``algo.record_video(dir)``). Callbacks: ``config.callbacks(...)``, the episode hooks replayed on the
driver after each iteration (:mod:`impala_rs.callbacks`). Ray Tune: :class:`impala_rs.tune.Impala`.
"""

# The native module links the torch wheel's libtorch (its run path is `../torch/lib`), so it
# loads without importing torch (which takes seconds) and `import torch` later shares that
# same libtorch.
from ._torch_pin import torch_problem

try:
    from ._impala_rs import ConfigError, ImpalaError, __version__, evaluate_checkpoint
except ImportError as error:
    # Most often a torch wheel other than the one the module links: say which and the fix.
    problem = torch_problem()
    if problem is None:
        raise
    raise ImportError(problem) from error
from .algorithm import Impala
from .callbacks import DefaultCallbacks, RLlibCallback
from .config import IMPALAConfig
from .episode import MultiAgentEpisode, SingleAgentEpisode
from .models import register_custom_model, registered_models
from .policy import DEFAULT_POLICY_ID, Policy
from .registry import register_env, registered_envs
from .rl_module import DefaultModelConfig, MultiRLModuleSpec, RLModuleSpec
from .rl_module_torchscript import TorchScriptModule

#: RLlib's spelling of the algorithm's name.
IMPALA = Impala


def __getattr__(name):
    # `record_video` is imported on first use: `python -m impala_rs.video` runs that module as
    # a script, which runpy warns of when importing the package has already imported it.
    if name == "record_video":
        from .video import record_video

        return record_video
    raise AttributeError(f"module 'impala_rs' has no attribute {name!r}")

__all__ = [
    "IMPALA",
    "DEFAULT_POLICY_ID",
    "IMPALAConfig",
    "DefaultCallbacks",
    "DefaultModelConfig",
    "MultiRLModuleSpec",
    "RLModuleSpec",
    "TorchScriptModule",
    "RLlibCallback",
    "ConfigError",
    "Impala",
    "ImpalaError",
    "MultiAgentEpisode",
    "Policy",
    "SingleAgentEpisode",
    "__version__",
    "evaluate_checkpoint",
    "record_video",
    "register_custom_model",
    "register_env",
    "registered_envs",
    "registered_models",
]
