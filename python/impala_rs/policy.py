"""``Policy``: a trained policy acting outside training (RLlib's old-stack ``Policy``), from a
checkpoint (:meth:`Policy.from_checkpoint`) or from an algorithm (``algo.get_policy()``)."""

import os

import numpy as np

from . import _impala_rs
from .config import IMPALAConfig
from .registry import PickledCreator

#: The id of the one policy an algorithm trains (RLlib's ``DEFAULT_POLICY_ID``).
DEFAULT_POLICY_ID = "default_policy"


def _floats(values):
    """``values`` as native-endian float32 bytes, flattened row-major."""
    return np.ascontiguousarray(values, dtype=np.float32).tobytes()


def _tensors(weights):
    """``{name: array}`` as the native side takes weights: ``[(name, shape, float32 bytes)]``."""
    arrays = {name: np.asarray(value, dtype=np.float32) for name, value in weights.items()}
    return [(name, list(a.shape), _floats(a)) for name, a in arrays.items()]


def _array(raw, shape=(-1,)):
    return np.frombuffer(raw, dtype=np.float32).reshape(shape)


class Policy:
    """A trained policy: the model a run trained with its weights, acting as the run's env
    runners did, in Rust with the interpreter lock released. Observations are the env's own
    (numpy arrays, lists or ints: ``Box``, ``Discrete``, ``MultiDiscrete``; a ``Dict`` or
    ``Tuple`` observation as ``gymnasium.spaces.flatten(env.observation_space, obs)`` gives it,
    the order the env bridge trains with); the run's observation filter
    (``normalize_observations``) is applied with its saved statistics and never updated.
    ``explore=False`` acts greedily (the argmax, or the Gaussian's mean); ``Box`` actions are
    clipped when the run's config says ``clip_actions``. A recurrent model's state is a list of
    one float32 array (its flat state, ``get_initial_state()`` starting an episode); a state
    given as several arrays (RLlib's ``[h, c]``) is read as their values one after another."""

    def __init__(self, native):
        self._native = native

    @classmethod
    def from_checkpoint(cls, checkpoint):
        """The policy of a checkpoint (a ``checkpoint_NNNNNN`` folder, or a run folder's
        newest), on the CPU, with no algorithm, env runners or learner. The checkpoint's files
        are verified against its manifest; a damaged one raises ``ImpalaError``. A run on an
        env given to :func:`register_env` (or as a class) needs it registered again here: one
        env is built, in an env worker process, for its spaces."""
        try:
            config = IMPALAConfig.from_dict(_impala_rs.checkpoint_config(str(checkpoint)))
        except _impala_rs.ImpalaError:
            # A damaged or missing checkpoint: raised as loading a policy words it (its fix
            # is another checkpoint, not a new run).
            return cls(_impala_rs.Policy.from_checkpoint(str(checkpoint)))
        name, creator = config._env_creator()
        if creator is None:
            return cls(_impala_rs.Policy.from_checkpoint(str(checkpoint)))
        pickled = PickledCreator(name, creator)
        try:
            return cls(_impala_rs.Policy.from_checkpoint(str(checkpoint), pickled.path))
        finally:
            pickled.remove()

    @property
    def observation_space(self):
        """The observation space, as a dict (``{"type": "Box", "low", "high", "shape"}``...)."""
        return self._native.observation_space

    @property
    def action_space(self):
        """The action space, as a dict (``{"type": "Discrete", "n"}``...)."""
        return self._native.action_space

    def get_initial_state(self):
        """The state an episode starts from: ``[zeros(state_dim)]``, or ``[]`` without one."""
        n = self._native.state_dim
        return [np.zeros(n, dtype=np.float32)] if n else []

    def is_recurrent(self):
        """Whether the model carries state from step to step."""
        return self._native.state_dim > 0

    def compute_single_action(self, obs=None, state=None, explore=True):
        """Acts on one observation: ``(action, state_out, info)`` as RLlib's
        ``Policy.compute_single_action`` (``info`` holds ``action_dist_inputs``,
        ``action_logp`` and ``vf_preds``). ``state`` defaults to the initial state."""
        states = None if not state else [np.asarray(s, dtype=np.float32)[None] for s in state]
        actions, state_out, info = self.compute_actions([obs], states, explore=explore)
        return (
            actions[0],
            [s[0] for s in state_out],
            {key: value[0] for key, value in info.items()},
        )

    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        """Acts on a batch of observations: ``(actions, state_outs, info)`` as RLlib's
        ``Policy.compute_actions``, every row of ``state_batches`` (``[array [n, state_dim]]``,
        or None for initial states) and of the results belonging to one observation."""
        n = len(obs_batch)
        try:
            # One conversion for a batch of equal shapes (an array, or a list of arrays).
            obs = _floats(np.asarray(obs_batch, dtype=np.float32).reshape(n, -1))
        except ValueError:
            rows = [np.asarray(o, dtype=np.float32).reshape(-1) for o in obs_batch]
            obs = _floats(np.concatenate(rows)) if rows else b""
        # A state given as several arrays (RLlib's LSTM `[h, c]`) is their rows side by side.
        states = b""
        if state_batches:
            states = _floats(np.concatenate([np.asarray(s, dtype=np.float32).reshape(n, -1) for s in state_batches], axis=1))
        raw = self._native.compute_actions(obs, states, bool(explore))
        actions, state_out, dist_inputs, logp, vf_preds = raw
        info = {
            "action_dist_inputs": _array(dist_inputs, (n, -1)),
            "action_logp": _array(logp),
            "vf_preds": _array(vf_preds),
        }
        state_dim = self._native.state_dim
        state_outs = [_array(state_out, (n, state_dim))] if state_dim else []
        return self._actions(_array(actions), n), state_outs, info

    def _actions(self, flat, n):
        """Actions in the action space's form: indices as int64, ``Box`` values in its shape."""
        space = self.action_space
        if space["type"] == "Discrete":
            return flat.astype(np.int64)
        if space["type"] == "MultiDiscrete":
            return flat.astype(np.int64).reshape(n, len(space["nvec"]))
        return flat.reshape((n, *space["shape"]))

    def get_weights(self):
        """The model's weights: ``{parameter name: float32 array}`` (RLlib's
        ``Policy.get_weights``)."""
        return {name: _array(raw, shape).copy() for name, shape, raw in self._native.get_weights()}

    def export_model(self, export_dir, onnx=None):
        """Writes the policy as ``export_dir/model.pt`` (RLlib's ``Policy.export_model``), a
        TorchScript module plain PyTorch runs without impala_rs: ``torch.jit.load(path)(obs)``
        gives ``(logits, value)``, or with ``(obs, state)`` ``(logits, value, state)`` for a
        recurrent model. ``obs`` is float32 ``[B, *shape]`` as :meth:`compute_actions` takes it
        (images ``[B, H, W, C]`` of 0-255 values, ``Discrete`` observations ``[B]`` indices),
        the run's observation filter folded in; ``logits`` are ``info["action_dist_inputs"]``
        (argmax for a greedy ``Discrete`` action; a ``Box`` policy's means then log-stds), and
        the state ``[B, state_dim]`` starts an episode at zeros. Returns the file's path."""
        if onnx is not None:
            raise ValueError(
                f"export_model(onnx={onnx!r}): ONNX export is not supported; the TorchScript "
                "model.pt it writes with onnx=None converts with torch.onnx.export"
            )
        os.makedirs(export_dir, exist_ok=True)
        path = os.path.join(str(export_dir), "model.pt")
        self._native.export_torchscript(path)
        return path

    def set_weights(self, weights):
        """Replaces the model's weights with ``{parameter name: array}``, every parameter of
        ``get_weights()``; a missing, unknown or misshapen one raises ``ImpalaError`` naming
        it, and the policy keeps its weights."""
        self._native.set_weights(_tensors(weights))
