"""Ray Tune: :class:`Impala`, a ``tune.Trainable`` running impala-rs trials.

RLlib's Tune example runs with only its import and trainable changed::

    from impala_rs import IMPALAConfig
    from impala_rs.tune import Impala
    from ray import tune

    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(lr=tune.grid_search([0.0001, 0.0002]), grad_clip=20.0)
        .learners(num_learners=1)
    )
    tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 1}),
    ).fit()

Tune turns the config into a dict (``to_dict()``), resolves its search spaces per trial and
hands each trial its dict. Checkpoints go through Tune (``save_checkpoint`` /
``load_checkpoint``; ``tune.CheckpointConfig`` applies); each holds a checkpoint folder that
``impala evaluate --checkpoint`` reads. Each trial asks Tune for the CPUs (and GPUs) its config
uses, as RLlib's algorithms do. This module needs Ray (``pip install "ray[tune]"``); the rest of
``impala_rs`` does not.
"""

try:
    from ray import tune as _tune
except ImportError as _exc:  # pragma: no cover - exercised only without Ray
    raise ImportError(
        'impala_rs.tune needs Ray Tune: pip install "ray[tune]" (the rest of impala_rs works '
        "without it)"
    ) from _exc

from . import _impala_rs, models, registry
from .algorithm import Impala as _Algorithm
from .config import IMPALAConfig

# Creators and model classes registered before this import reach Tune's trial processes too.
for _name, _creator in registry._CREATORS.items():
    registry.register_with_tune(_name, _creator)
for _name, _model in models._MODELS.items():
    models.register_with_tune(_name, _model)

try:
    # Tune takes a config object as `param_space` when it is one of its `_Config`s (as RLlib's
    # AlgorithmConfig is): it then calls `to_dict()`. Registering makes IMPALAConfig one.
    from ray.tune.tune import _Config

    _Config.register(IMPALAConfig)
except (ImportError, AttributeError):  # pragma: no cover - other Ray versions: pass to_dict()
    pass


class Impala(_tune.Trainable):
    """One impala-rs training run as a Tune trial: ``step()`` is one ``train()`` iteration."""

    @classmethod
    def default_resource_request(cls, config):
        """The trial's CPUs and GPUs: the driver with its learner, and one bundle per env
        runner, as the config's resource request says (RLlib's placement group)."""
        if isinstance(config, IMPALAConfig):
            config = config.to_dict()
        bundles, strategy = _impala_rs.resource_bundles(IMPALAConfig.from_dict(config)._checked())
        return _tune.PlacementGroupFactory(bundles, strategy=strategy)

    def setup(self, config):
        # Built at the first step, or restored by a first `load_checkpoint` (a trial resumed
        # after a failure): then its env runners start once, with the restored weights. A bad
        # config fails here, when Tune creates the trial, not at its first step; its warnings
        # come once, from the build.
        self._config = IMPALAConfig.from_dict(config)
        _impala_rs.check_config(self._config._native_dict())
        self.algo = None

    def _algo(self):
        if self.algo is None:
            self.algo = _Algorithm(self._config)
        return self.algo

    def step(self):
        return self._algo().train()

    def save_checkpoint(self, checkpoint_dir):
        self._algo().save(checkpoint_dir)
        return None

    def load_checkpoint(self, checkpoint):
        path = checkpoint if isinstance(checkpoint, str) else getattr(checkpoint, "path", checkpoint)
        if self.algo is None:
            self.algo = _Algorithm(self._config, _checkpoint=path)
        else:
            # PBT's exploit: another trial's checkpoint into this running one.
            self.algo.restore(path)

    def cleanup(self):
        algo = getattr(self, "algo", None)
        if algo is not None:
            algo.stop()


__all__ = ["Impala"]
