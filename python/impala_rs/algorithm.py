"""``Impala``: RLlib's algorithm object, over the Rust ``impala`` library."""

import json
import sys
import tempfile

from . import _impala_rs
from .callbacks import put_at_path
from .config import IMPALAConfig
from .models import python_model, rl_module_instance, script_model
from .policy import DEFAULT_POLICY_ID, Policy, _tensors
from .ray_runners import RayEnvRunners
from .registry import PickledCreator
from .rl_module_torchscript import TorchScriptModule, is_rl_module_class, load_trained_weights


class Impala:
    """RLlib's ``Impala`` (what ``IMPALAConfig.build()`` returns): ``train()`` runs one
    iteration and returns its result dict (the keys of ``result.json``), ``evaluate()``,
    ``save()``/``restore()`` (checkpoints interchangeable with the ``impala`` command's),
    ``stop()``. Training runs in Rust threads with the interpreter lock released; Ctrl-C during
    ``train()`` ends the iteration early (it counts) and raises ``KeyboardInterrupt`` with that
    iteration's result as its ``result``, leaving the algorithm usable (to save, say). Also a
    context manager that stops on exit."""

    def __init__(self, config=None, *, _checkpoint=None):
        # `_checkpoint` (from `from_checkpoint`): restored before the env runners start.
        if config is None:
            config = IMPALAConfig()
        elif isinstance(config, dict):
            config = IMPALAConfig.from_dict(config)
        elif not isinstance(config, IMPALAConfig):
            raise TypeError(f"Impala(config): expects an IMPALAConfig or a dict, got {type(config).__name__}")
        self.config = config.copy()
        native = self.config._checked()
        if native.get("python_executable") is None:
            # Python envs run in env worker processes of this interpreter.
            native["python_executable"] = sys.executable
        name, creator = self.config._env_creator()
        self._creator = PickledCreator(name, creator) if creator is not None else None
        # The policy `compute_single_action`/`compute_actions` act with, brought up to the
        # learner's weights on every call.
        self._policy = None
        creator_path = self._creator.path if self._creator else None
        # Ray env runner actors connect to a server bound before the algorithm is built, which
        # waits for them.
        self._ray_runners = None
        self._callbacks = self.config._callbacks()
        # Episode hooks replay what the env runners record; remote runners record nothing.
        record_episodes = self._callbacks.replays_episodes
        try:
            if record_episodes and native.get("env_runner_backend") == "ray":
                raise TypeError(
                    "episode callbacks (on_episode_start, on_episode_step, on_episode_end, ...) "
                    "need local env runners: they replay the episodes that the runner threads of "
                    "this process record, and Ray env runner actors send none; use "
                    "env_runners(env_runner_backend='threads'), or leave the episode callbacks out"
                )
            if native.get("env_runner_backend") == "ray":
                self._ray_runners = RayEnvRunners(native, self._creator)
            # A user's torch class or RLModule: built for its policy's spaces and scripted
            # here; the core trains the file. `self.config` keeps the class as written.
            self._python_models = self.config._python_models()
            self._policy_specs = {}
            if self._python_models:
                self._policy_specs = _impala_rs.policy_specs(native, creator_path)
                for policy_id, (label, cls, model, seed) in self._policy_models(native.get("seed")).items():
                    path = script_model(label, cls, self._policy_specs[policy_id], model, seed)
                    if policy_id == DEFAULT_POLICY_ID and len(self._policy_specs) == 1:
                        native["model"]["custom_model"] = path
                    else:
                        policy = native.setdefault("policy_config", {}).setdefault(policy_id, {})
                        policy.setdefault("model", {}).update(custom_model=path, custom_model_config={})
            server = self._ray_runners.server if self._ray_runners else None
            self._native = _impala_rs.Algorithm(native, creator_path, server, _checkpoint, record_episodes)
            self._callbacks.call("on_algorithm_init", algorithm=self)
            if _checkpoint is not None:
                self._callbacks.call("on_checkpoint_loaded", algorithm=self)
        except BaseException:
            if self._ray_runners is not None:
                self._ray_runners.stop()
            if self._creator is not None:
                self._creator.remove()
            raise

    def _policy_models(self, seed):
        """Per policy with a Python model class: ``(label, class, model dict, seed)``; a
        policy's own model (``MultiRLModuleSpec``) before the run's. Each policy's initial
        weights are drawn from the run's ``seed`` plus its index, so policies start apart."""
        out = {}
        for index, policy_id in enumerate(self._policy_specs):
            model = self._python_models.get(policy_id, self._python_models.get(None))
            if model is not None:
                label, cls = python_model(model)
                out[policy_id] = (label, cls, model, None if seed is None else seed + index)
        return out

    @classmethod
    def from_checkpoint(cls, path):
        """An algorithm built from a checkpoint's config and restored from it (a checkpoint
        folder, or a run folder's newest checkpoint)."""
        config = IMPALAConfig.from_dict(_impala_rs.checkpoint_config(str(path)))
        return cls(config, _checkpoint=path)

    def train(self):
        """One training iteration (RLlib's ``train()``); the result dict, with what the
        callbacks added or logged. The episode callbacks see the iteration's episodes first
        (replayed on the driver, see :mod:`impala_rs.callbacks`), then ``on_train_result``."""
        result = _nested(self._native.train())
        if self._callbacks.replays_episodes:
            self._callbacks.replay_episodes(self._native.take_episodes(), result)
        if self._callbacks:
            self._callbacks.call("on_train_result", algorithm=self, result=result)
            self._callbacks.metrics_logger.reduce_into(result)
        return result

    def evaluate(self):
        """``evaluation_duration`` evaluation episodes with the current weights (greedy unless
        ``evaluation_explore``); ``{"env_runners": {"episode_return_mean": ...}}``."""
        self._callbacks.call("on_evaluate_start", algorithm=self)
        result = self._native.evaluate()
        self._callbacks.call("on_evaluate_end", algorithm=self, evaluation_metrics=result)
        return result

    def get_policy(self, policy_id=DEFAULT_POLICY_ID):
        """Policy ``policy_id`` (RLlib's ``algo.get_policy()``) with its learner's current
        weights and the run's observation filter: a :class:`Policy` snapshot that later
        training does not change (call again for newer weights)."""
        self._check_policy_id(policy_id)
        return Policy(self._native.get_policy(policy_id))

    def get_module(self, module_id=DEFAULT_POLICY_ID):
        """The trained policy's network as RLlib's ``algo.get_module(module_id)`` gives it, at
        the learner's current weights (a copy: later training does not change it). A run
        whose ``RLModuleSpec`` names a module class gets that class, built as at the start and
        given the trained weights; a catalog or TorchScript model comes as a
        :class:`impala_rs.TorchScriptModule` over the exported policy (the observation filter
        folded in), with RLlib's ``forward_inference``/``forward_exploration``/
        ``forward_train`` and ``compute_values``. Needs torch."""
        self._check_policy_id(module_id)
        label, cls, model, seed = self._policy_models(self.config.to_dict().get("seed")).get(
            module_id, (None, None, None, None)
        )
        if is_rl_module_class(cls):
            module = rl_module_instance(cls, self._policy_specs[module_id], model.get("custom_model_config"), seed)
            load_trained_weights(module, self.get_weights([module_id])[module_id])
            return module.eval()
        with tempfile.TemporaryDirectory(prefix="impala_rs_module_") as folder:
            return TorchScriptModule(self.export_policy_model(folder, policy_id=module_id))

    @property
    def policy_ids(self):
        """The policies: ``["default_policy"]``, or a multi-agent run's ``policies``."""
        return self._native.policy_ids

    def _current_policy(self, policy_id):
        self._check_policy_id(policy_id)
        if policy_id != DEFAULT_POLICY_ID:
            return self.get_policy(policy_id)
        if self._policy is None:
            self._policy = self.get_policy()
        else:
            self._native.update_policy(self._policy._native)
        return self._policy

    def compute_single_action(self, observation=None, state=None, policy_id=DEFAULT_POLICY_ID, explore=True):
        """An action for one observation with the learner's current weights (RLlib's
        ``algo.compute_single_action``): the action, or ``(action, state_out, info)`` when a
        ``state`` is given (``policy.get_initial_state()`` for a new episode). Greedy when
        ``explore`` is False. See :class:`Policy` for what observations may be."""
        policy = self._current_policy(policy_id)
        action, state_out, info = policy.compute_single_action(observation, state, explore=explore)
        return action if state is None else (action, state_out, info)

    def compute_actions(self, obs_batch, state_batches=None, policy_id=DEFAULT_POLICY_ID, explore=True):
        """Actions for a batch of observations with the learner's current weights: the
        actions, or ``(actions, state_outs, info)`` when ``state_batches`` are given."""
        policy = self._current_policy(policy_id)
        actions, state_outs, info = policy.compute_actions(obs_batch, state_batches, explore=explore)
        return actions if state_batches is None else (actions, state_outs, info)

    def export_policy_model(self, export_dir, policy_id=DEFAULT_POLICY_ID, onnx=None):
        """Writes the policy, at the learner's current weights, as ``export_dir/model.pt``
        (RLlib's ``algo.export_policy_model``): a TorchScript module for plain PyTorch; see
        :meth:`Policy.export_model`. Returns the file's path."""
        return self.get_policy(policy_id).export_model(export_dir, onnx=onnx)

    def record_video(self, video_dir, episodes=1, explore=False, seed=None, fps=None, max_steps=None):
        """Records the policy at the learner's current weights playing the run's env, one
        MP4 per episode in ``video_dir``, as :func:`impala_rs.record_video` records a
        checkpoint's (no checkpoint is written); returns its per-episode dicts (``path``,
        ``episode_return``, ``episode_len``, ``frames``)."""
        from .video import record_policy  # not at import: see the package's __getattr__

        episodes = record_policy(self.get_policy(), self.config, video_dir, episodes, explore, seed, fps, max_steps)
        return list(episodes)

    def get_weights(self, policies=None):
        """The learners' current weights as RLlib's ``algo.get_weights()`` gives them:
        ``{policy id: {parameter name: float32 array}}``, for ``policies`` (default: all)."""
        ids = self.policy_ids if policies is None else list(policies)
        return {policy_id: self.get_policy(policy_id).get_weights() for policy_id in ids}

    def set_weights(self, weights):
        """Replaces the learner's weights (RLlib's ``algo.set_weights()``) with
        ``{policy id: {parameter name: array}}``, every parameter of ``get_weights()``; the env
        runners act with them from their next fragment. A missing, unknown or misshapen
        parameter raises ``ImpalaError`` naming it, and nothing changes."""
        for policy_id, policy_weights in weights.items():
            self._check_policy_id(policy_id)
            self._native.set_weights(_tensors(policy_weights), policy_id)

    def save(self, checkpoint_dir=None):
        """Writes ``checkpoint_dir/checkpoint_<iteration>`` (a fresh temporary folder when
        ``checkpoint_dir`` is None) and returns its path; ``impala evaluate --checkpoint PATH``
        and ``impala train --resume`` read it."""
        if checkpoint_dir is None:
            checkpoint_dir = tempfile.mkdtemp(prefix="impala_rs_checkpoint_")
        return self._native.save(str(checkpoint_dir))

    def restore(self, checkpoint_path, policy_ids=None):
        """Restores a checkpoint of the same env and model: weights, optimizer state,
        counters and iteration. With ``policy_ids``, only those policies'
        weights and optimizer state, the rest of the run as it is."""
        if policy_ids is None:
            self._native.restore(str(checkpoint_path))
        else:
            for policy_id in policy_ids:
                self._check_policy_id(policy_id)
                self._native.restore_policy(str(checkpoint_path), policy_id)
        self._callbacks.call("on_checkpoint_loaded", algorithm=self)

    def stop(self):
        """Stops the env runners (and their Ray actors), env workers and learner (RLlib's
        ``stop()``)."""
        try:
            self._native.stop()
        finally:
            if self._ray_runners is not None:
                self._ray_runners.stop()
        if self._creator is not None:
            self._creator.remove()

    @property
    def iteration(self):
        """Completed training iterations."""
        return self._native.iteration

    @property
    def training_iteration(self):
        """RLlib's name of :attr:`iteration`."""
        return self._native.iteration

    def get_config(self):
        """The config it was built from."""
        return self.config

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __repr__(self):
        try:
            state = f"iteration={self.iteration}"
        except _impala_rs.ImpalaError:
            state = "stopped"
        return f"Impala(env={json.dumps(self.config._env_creator()[0])}, {state})"

    def _check_policy_id(self, policy_id):
        """A policy id the algorithm does not have is a ``KeyError`` naming those it has."""
        ids = self.policy_ids
        if policy_id not in ids:
            raise KeyError(f"no policy {policy_id!r}: the algorithm's policies are {ids}")


def _nested(result):
    """``result`` with its ``env_runners`` keys that hold a path (``"a/b"``) as nested dicts,
    where RLlib's result has them (``result["env_runners"]["module_episode_returns_mean"]["p0"]``);
    Tune's flattening gives back the same names."""
    runners = result.get("env_runners")
    if isinstance(runners, dict):
        for key in [k for k in runners if "/" in k]:
            put_at_path(runners, key.split("/"), runners.pop(key))
    return result
