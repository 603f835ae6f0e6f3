"""A user's ``RLModule`` (RLlib's new-stack ``TorchRLModule`` subclass, with ``ValueFunctionAPI``)
as the TorchScript module the Rust learner and env runners run, and back.

RLlib's module reads a batch dict and returns one: ``_forward_train({"obs": [B, ...]})`` gives
``{"action_dist_inputs": logits}`` and ``compute_values(batch, embeddings)`` the values. The core's
TorchScript contract is ``forward(obs) -> (logits, value)``, or for a recurrent module
``forward(obs, state: List[Tensor]) -> (logits, value, state)`` one step at a time with
``get_initial_state() -> List[Tensor]``. The module is built once, as RLlib builds it
(``cls(observation_space=, action_space=, inference_only=False, model_config=)``), and traced
through a thin adapter: a recurrent module sees RLlib's ``[B, T=1, ...]`` observations and its
``state_in`` dict, whose keys (sorted) are the core's state list. Tracing, not scripting, because
RLlib's modules are full Python classes; what tracing cannot keep (output that changes with the
batch size through Python control flow) is checked on a second batch size and refused.

The trained weights come back by name: the adapter holds the module as ``net.module``, so a
parameter ``_pi_head.weight`` of the module is ``net.module._pi_head.weight`` in the core.
"""

import sys
import traceback
import warnings
from typing import List, Tuple

#: The prefix of the module's parameters in the TorchScript module the core trains.
PREFIX = "net.module."

#: RLlib's batch column names (``ray.rllib.core.columns.Columns``), as strings so that this
#: module needs no Ray.
OBS = "obs"
ACTION_DIST_INPUTS = "action_dist_inputs"
STATE_IN = "state_in"
STATE_OUT = "state_out"
EMBEDDINGS = "embeddings"

#: How a module's value-function children are named (RLlib's default modules' ``vf``, the
#: examples' ``_values``), for ``_separate_vf_optimizer``.
_VALUE_PREFIXES = ("vf", "_vf", "value", "_value")


def is_rl_module_class(cls):
    """Whether ``cls`` is an RLlib ``RLModule`` subclass (told by its bases' names, so that no
    Ray import is needed to tell a ``torch.nn.Module`` model from a module)."""
    return isinstance(cls, type) and any(k.__name__ == "RLModule" for k in cls.__mro__)


class RLModuleError(Exception):
    """Building or tracing a user's module failed; the message names the class and the line."""


def _where(exc, cls):
    """``file:line`` of the innermost frame of ``exc`` in the file that defines ``cls`` (the
    user's code), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    source = getattr(sys.modules.get(cls.__module__), "__file__", None)
    mine = [f for f in frames if source and f.filename == source]
    frame = (mine or frames)[-1]
    return f"{frame.filename}:{frame.lineno}"


def build(cls, observation_space, action_space, model_config):
    """The module as RLlib's ``RLModuleSpec.build()`` makes it; raises :class:`RLModuleError`
    naming the line that failed."""
    try:
        return cls(
            observation_space=observation_space,
            action_space=action_space,
            inference_only=False,
            model_config=dict(model_config or {}),
        )
    except Exception as exc:
        raise RLModuleError(
            f"building RLModule {cls.__qualname__}(observation_space, action_space, "
            f"model_config={model_config!r}) raised {type(exc).__name__} at {_where(exc, cls)}: {exc}"
        ) from exc


def _refuse_custom_distributions(module):
    """The core samples from the distribution RLlib's default modules use for the action space
    (categorical, or a diagonal Gaussian over means then log-stds); a module that names its own
    would be trained with another one, so it is refused."""
    base = None
    for klass in type(module).__mro__:
        if klass.__name__ == "TorchRLModule":
            base = klass
    for name in ("get_train_action_dist_cls", "get_exploration_action_dist_cls", "get_inference_action_dist_cls"):
        mine = getattr(type(module), name, None)
        if base is not None and mine is not None and mine is not getattr(base, name, None):
            raise RLModuleError(
                f"RLModule {type(module).__qualname__} defines {name}(): impala-rs samples "
                "from the action space's default distribution (categorical, or a diagonal "
                "Gaussian over the means then the log-stds); remove the method to train it"
            )


def _initial_state(torch, module):
    """``(keys, tensors)`` of the module's ``get_initial_state()`` dict, keys sorted; empty for
    a module without state."""
    state = module.get_initial_state() if hasattr(module, "get_initial_state") else {}
    if not state:
        return [], []
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise RLModuleError(
            f"RLModule {type(module).__qualname__}.get_initial_state() returned {type(state).__name__}; "
            "impala-rs takes a dict of str to arrays or tensors (RLlib's `{'h': ..., 'c': ...}`)"
        )
    keys = sorted(state)
    return keys, [torch.as_tensor(state[k], dtype=torch.float32) for k in keys]


def to_torchscript(module, observation_shape):
    """The TorchScript module (``torch.jit.ScriptModule``) the core trains for ``module``:
    the adapter traced at batch sizes 2 and checked at 3. Raises :class:`RLModuleError`."""
    import torch
    from torch import nn

    cls = type(module)
    if not hasattr(module, "compute_values"):
        raise RLModuleError(
            f"RLModule {cls.__qualname__} has no compute_values(): IMPALA needs the values of "
            "the module's value function; subclass ValueFunctionAPI and define "
            "compute_values(batch, embeddings=None)"
        )
    if not isinstance(module, nn.Module):
        raise RLModuleError(f"RLModule {cls.__qualname__} is not a TorchRLModule (a torch.nn.Module)")
    _refuse_custom_distributions(module)
    keys, initial = _initial_state(torch, module)

    class Step(nn.Module):
        """The module's train forward and values for one step, RLlib's way."""

        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, obs, state=None):
            batch = {OBS: obs[:, None] if keys else obs}
            if keys:
                batch[STATE_IN] = dict(zip(keys, state))
            out = self.module._forward_train(batch)
            logits = out[ACTION_DIST_INPUTS]
            values = self.module.compute_values(batch, embeddings=out.get(EMBEDDINGS))
            if not keys:
                return logits, values.reshape(-1)
            state_out = out[STATE_OUT]
            return logits[:, 0], values.reshape(-1), [state_out[k].reshape(s.shape) for k, s in zip(keys, state)]

    step = Step()
    prefixes = [PREFIX + name for name, _ in module.named_children() if name.startswith(_VALUE_PREFIXES)]

    def example(b):
        obs = torch.empty((b, *observation_shape), dtype=torch.float32).uniform_(-1.0, 1.0)
        if not keys:
            return (obs,)
        return (obs, [s.expand(b, *s.shape).contiguous() for s in initial])

    try:
        module.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(step, example(2), check_trace=False, strict=False)
    except Exception as exc:
        raise RLModuleError(
            f"RLModule {cls.__qualname__}: running _forward_train and compute_values on a batch "
            f"of observations {tuple(observation_shape)} raised {type(exc).__name__} at "
            f"{_where(exc, cls)}: {exc}"
        ) from exc
    inputs = example(3)
    with torch.no_grad():
        want, got = _flat(step(*inputs)), _flat(traced(*inputs))
    if any(a.shape != b.shape or not torch.allclose(a, b, atol=1e-5) for a, b in zip(want, got)):
        raise RLModuleError(
            f"RLModule {cls.__qualname__}: its traced forward differs from the module's at "
            "another batch size, so it depends on Python control flow or on the batch size "
            "through Python numbers; compute with tensor operations (x.shape[0] inside torch "
            "calls is fine)"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        stateless, recurrent = _shells()
        shell = recurrent(traced, initial, prefixes) if keys else stateless(traced, prefixes)
        return torch.jit.script(shell)


def _flat(outputs):
    """The tensors of a forward's outputs, state lists opened."""
    return [t for x in outputs for t in (x if isinstance(x, (tuple, list)) else [x])]


def _shells():
    """The scripted shells around a traced step (defined here: they need torch, which the
    package imports only for Python models)."""
    import torch
    from torch import Tensor, nn

    class Stateless(nn.Module):
        """``forward(obs) -> (logits, value)`` over the traced step."""

        def __init__(self, net, prefixes: List[str]):
            super().__init__()
            self.net = net
            self.prefixes = prefixes

        def forward(self, obs: Tensor) -> Tuple[Tensor, Tensor]:
            logits, value = self.net(obs)
            return logits, value

        @torch.jit.export
        def value_function_prefixes(self) -> List[str]:
            return self.prefixes

    class Recurrent(nn.Module):
        """``forward(obs, state) -> (logits, value, state)`` over the traced step, the state
        list in the sorted order of the module's ``get_initial_state()`` keys."""

        def __init__(self, net, initial: List[Tensor], prefixes: List[str]):
            super().__init__()
            self.net = net
            self.initial = initial
            self.prefixes = prefixes

        def forward(self, obs: Tensor, state: List[Tensor]) -> Tuple[Tensor, Tensor, List[Tensor]]:
            logits, value, state_out = self.net(obs, state)
            return logits, value, state_out

        @torch.jit.export
        def get_initial_state(self) -> List[Tensor]:
            return [s.clone() for s in self.initial]

        @torch.jit.export
        def value_function_prefixes(self) -> List[str]:
            return self.prefixes

    return Stateless, Recurrent


def load_trained_weights(module, weights):
    """Copies the core's trained ``weights`` (``{name: array}``, the adapter's names) into the
    user's ``module``; a parameter the core does not have raises ``KeyError`` naming it."""
    import torch

    with torch.no_grad():
        for name, parameter in module.named_parameters():
            trained = weights.get(PREFIX + name)
            if trained is None:
                raise KeyError(f"the trained weights have no {PREFIX + name} for the module's {name}")
            parameter.copy_(torch.as_tensor(trained).reshape(parameter.shape))


class TorchScriptModule:
    """A policy exported as TorchScript, called as RLlib's RLModules are: ``forward_inference``,
    ``forward_exploration`` and ``forward_train`` take ``{"obs": [B, ...]}`` (and ``"state_in"``,
    a list of ``[B, state_dim]`` tensors, for a recurrent model) and return
    ``{"action_dist_inputs": logits}`` (with ``"state_out"``); ``compute_values(batch)`` gives the
    values. A recurrent model's state is one ``[B, state_dim]`` tensor, zeros at an episode's
    start (``algo.get_policy().get_initial_state()``). What ``algo.get_module()`` returns for a
    catalog or TorchScript model."""

    def __init__(self, path):
        import torch

        self.model = torch.jit.load(path)
        self.model.eval()

    def _run(self, batch):
        import torch

        obs = torch.as_tensor(batch[OBS], dtype=torch.float32)
        with torch.no_grad():
            if STATE_IN in batch:
                logits, values, state = self.model(obs, list(batch[STATE_IN]))
                return {ACTION_DIST_INPUTS: logits, STATE_OUT: state, "vf_preds": values}
            logits, values = self.model(obs)
            return {ACTION_DIST_INPUTS: logits, "vf_preds": values.reshape(-1)}

    def forward_inference(self, batch):
        """``{"action_dist_inputs": logits}`` for ``batch["obs"]``."""
        return self._run(batch)

    forward_exploration = forward_inference
    forward_train = forward_inference

    def compute_values(self, batch, embeddings=None):
        """The value function's ``[B]`` values for ``batch["obs"]``."""
        return self._run(batch)["vf_preds"]
