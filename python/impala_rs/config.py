"""``IMPALAConfig``: RLlib's config builder for IMPALA.

Option names, groups, defaults, aliases, checks and messages all come from the Rust
``impala-config`` crate (the ``impala`` command's), so a key means the same here, in a config
file and in ``impala train --set``.
"""

import copy
import importlib
import inspect
import warnings

from . import _impala_rs
from .models import python_model
from .registry import find_creator

#: RLlib's "not provided" marker: a group argument left out keeps its value.
NotProvided = type("NotProvided", (), {"__repr__": lambda self: "NotProvided"})()

_KEYS = {}  # top-level key -> (group, expected)
_MODEL_KEYS = {}  # model key -> expected
for _name, _group, _expected, _ in _impala_rs.config_keys():
    if _name.startswith("model."):
        _MODEL_KEYS[_name[len("model.") :]] = _expected
    else:
        _KEYS[_name] = (_group, _expected)
_ALIASES = {alias: (key, deprecated) for alias, key, deprecated in _impala_rs.config_aliases()}
_DEFAULTS = _impala_rs.default_config()


def _canonical(name):
    """The key `name` sets (itself, or the key an alias stands for) and whether the alias is
    deprecated."""
    key, deprecated = _ALIASES.get(name, (name, False))
    return key, deprecated


def _search_space(value):
    """The kind of Ray Tune search space `value` is (``grid_search``, a sampler such as
    ``tune.choice``), or None."""
    if isinstance(value, dict) and "grid_search" in value:
        return "grid_search"
    if type(value).__module__.startswith("ray.tune"):
        return type(value).__name__
    return None


class IMPALAConfig:
    """RLlib's ``IMPALAConfig``: group methods set options and return the config, so calls
    chain; ``build()`` makes the algorithm. Every option of RLlib's IMPALA is accepted under its
    RLlib name (new-stack names and old spellings too: ``num_workers`` warns and sets
    ``num_env_runners``).

    Unknown options and options given to the wrong group raise ``TypeError`` at once;
    ``validate()`` checks values and raises one :class:`impala_rs.ConfigError` listing every
    problem. Values may be Ray Tune search spaces (``tune.grid_search([...])``) for
    ``tune.Tuner(param_space=config)``.
    """

    def __init__(self, algo_class=None):
        if algo_class is not None:
            raise TypeError("IMPALAConfig(algo_class=...) is not supported: the algorithm is Impala")
        self._values = {}

    # --- RLlib's builder groups -------------------------------------------------------------

    def environment(self, env=NotProvided, **kwargs):
        """RLlib's ``environment()``: ``env`` (a native or Gymnasium id, an entry point
        ``"pkg.module:Name"``, a name given to ``register_env``, or a ``gymnasium.Env``
        subclass or creator), ``env_config``, ``clip_rewards``, ``clip_actions``,
        ``normalize_actions``, ``normalize_observations``, ``env_backend``,
        ``python_executable``."""
        if env is not NotProvided:
            kwargs["env"] = env
        return self._update("environment", kwargs)

    def training(self, **kwargs):
        """RLlib's ``training()``: the loss, optimizer, V-trace, learner queue and replay
        options (``lr`` and ``entropy_coeff`` also as RLlib's new-stack schedules,
        ``[[timestep, value], ...]``; ``grad_clip_by`` is ``"global_norm"``, ``"norm"`` or
        ``"value"``); ``model`` (a dict) is merged into the model options. Its ``custom_model``
        takes a ``torch.nn.Module`` class or a name given to ``register_custom_model`` (built
        with ``custom_model_config`` as keyword arguments and scripted), ``"impala_resnet"``
        or the path of a TorchScript file."""
        return self._update("training", kwargs)

    def env_runners(self, **kwargs):
        """RLlib's ``env_runners()``: ``num_env_runners``, ``num_envs_per_env_runner``,
        ``rollout_fragment_length``, ``sample_timeout_s``, ...; ``env_runner_backend="ray"``
        runs the env runners as Ray actors on the cluster ``ray.init`` joined (placed with
        ``num_cpus_per_env_runner``, ``custom_resources_per_env_runner`` and
        ``placement_strategy``) instead of threads of this process; with it,
        ``env_runner_tls=True`` makes them connect back over TLS, trusting a certificate made
        for the run (its key never leaves this process)."""
        return self._update("env_runners", kwargs)

    #: RLlib's old name of :meth:`env_runners`.
    rollouts = env_runners

    def fault_tolerance(self, **kwargs):
        """RLlib's ``fault_tolerance()``: ``restart_failed_env_runners``,
        ``restart_failed_sub_environments``, ``max_num_env_runner_restarts``."""
        return self._update("fault_tolerance", kwargs)

    def learners(self, **kwargs):
        """RLlib's ``learners()``: ``num_learners``, ``num_gpus_per_learner``,
        ``num_learner_threads``."""
        return self._update("learners", kwargs)

    def resources(self, **kwargs):
        """RLlib's ``resources()``: ``num_gpus``, ``num_cpus_for_main_process``, ``_fake_gpus``,
        ``placement_strategy``."""
        return self._update("resources", kwargs)

    def multi_agent(
        self,
        *,
        policies=NotProvided,
        policy_mapping_fn=NotProvided,
        policies_to_train=NotProvided,
        count_steps_by=NotProvided,
        **kwargs,
    ):
        """RLlib's ``multi_agent()``, for a multi-agent env: ``policies`` (ids: a list, a set,
        or a dict whose values are ``None`` or a ``PolicySpec`` whose ``config`` holds that
        policy's training and model options, e.g. ``{"lr": 1e-3, "model": {"fcnet_hiddens":
        [32]}}``; spaces come from the agents mapped to it), ``policy_mapping_fn`` (a callable
        ``(agent_id, episode, **kwargs) -> policy_id``, called once per agent id of the env when
        the algorithm is built, so it must not depend on the episode; or a dict from agent ids,
        or ``*`` patterns, to policy ids, the ``policy_mapping`` key of config files),
        ``policies_to_train`` (ids, or a callable ``(policy_id, batch) -> bool`` called once per
        policy) and ``count_steps_by`` (``"env_steps"`` or ``"agent_steps"``)."""
        if policies is not NotProvided:
            kwargs["policies"], configs = _policy_ids(policies)
            if configs:
                kwargs["policy_config"] = {**kwargs.get("policy_config", {}), **configs}
        if policy_mapping_fn is not NotProvided:
            if not (isinstance(policy_mapping_fn, dict) or callable(policy_mapping_fn)):
                raise TypeError(
                    "multi_agent(policy_mapping_fn=...): expects a callable (agent_id, episode, "
                    f"**kwargs) -> policy_id or a dict of agent ids to policy ids, got {policy_mapping_fn!r}"
                )
            kwargs["policy_mapping"] = policy_mapping_fn
        if policies_to_train is not NotProvided:
            if policies_to_train is not None and not callable(policies_to_train):
                policies_to_train = list(policies_to_train)
            kwargs["policies_to_train"] = policies_to_train
        if count_steps_by is not NotProvided:
            kwargs["count_steps_by"] = count_steps_by
        return self._update("multi_agent", kwargs)

    def reporting(self, **kwargs):
        """RLlib's ``reporting()``: ``min_time_s_per_iteration``,
        ``min_sample_timesteps_per_iteration``, ``metrics_num_episodes_for_smoothing``, ..."""
        return self._update("reporting", kwargs)

    def evaluation(self, **kwargs):
        """RLlib's ``evaluation()``: ``evaluation_interval``, ``evaluation_duration``,
        ``evaluation_duration_unit``, ``evaluation_num_env_runners``, ..."""
        return self._update("evaluation", kwargs)

    def debugging(self, **kwargs):
        """RLlib's ``debugging()``: ``seed``, ``log_level``, ``_env_runners_only``,
        ``_skip_learners``."""
        return self._update("debugging", kwargs)

    def api_stack(self, enable_rl_module_and_learner=NotProvided, enable_env_runner_and_connector_v2=NotProvided):
        """RLlib's ``api_stack()``: the API stack the config is written for. Both of RLlib's
        stacks drive the one engine here, so either setting trains the same way; it is kept as
        written."""
        return self._update(
            "api_stack",
            {
                "enable_rl_module_and_learner": enable_rl_module_and_learner,
                "enable_env_runner_and_connector_v2": enable_env_runner_and_connector_v2,
            },
        )

    def rl_module(
        self,
        *,
        model_config=NotProvided,
        rl_module_spec=NotProvided,
        algorithm_config_overrides_per_module=NotProvided,
        model_config_dict=NotProvided,
    ):
        """RLlib's ``rl_module()`` (new API stack): ``model_config`` (a ``DefaultModelConfig``,
        RLlib's or :class:`impala_rs.DefaultModelConfig`, or a dict of its fields; the old name
        ``model_config_dict`` too) sets the model options; ``rl_module_spec`` (an
        ``RLModuleSpec`` without a module class of its own, or a ``MultiRLModuleSpec`` of them,
        one per policy) sets the model, or each policy's; ``algorithm_config_overrides_per_module``
        sets training options per policy (``policy_config``). A spec's own ``module_class`` (a
        ``TorchRLModule`` with ``ValueFunctionAPI``) is built with its ``model_config`` and
        trained by the Rust learner as a custom model (``model.custom_model``). A
        ``DefaultModelConfig`` field with no counterpart here is refused by name."""
        from .rl_module import model_fields, model_options, spec_settings

        if model_config_dict is not NotProvided:
            if model_config is not NotProvided:
                raise TypeError("rl_module(): give model_config or its old name model_config_dict, not both")
            model_config = model_config_dict
        model = {}
        per_policy = {}
        if rl_module_spec is not NotProvided and rl_module_spec is not None:
            model, per_policy = spec_settings(rl_module_spec)
        if model_config is not NotProvided and "custom_model" in model:
            # RLlib's way: a module class whose spec has no model_config gets this one.
            if not model["custom_model_config"]:
                model["custom_model_config"] = model_fields(model_config)
        elif model_config is not NotProvided:
            model.update(model_options(model_config))
        if model:
            self._update("training", {"model": model})
        overrides = {} if algorithm_config_overrides_per_module is NotProvided else algorithm_config_overrides_per_module
        if per_policy or overrides:
            policy_config = copy.deepcopy(self._values.get("policy_config", {}))
            for policy_id, options in per_policy.items():
                policy_config.setdefault(policy_id, {})["model"] = options
            for policy_id, options in dict(overrides or {}).items():
                policy_config.setdefault(policy_id, {}).update(copy.deepcopy(dict(options)))
            self._update("multi_agent", {"policy_config": policy_config})
        return self

    def callbacks(self, callbacks_class=NotProvided, **hooks):
        """RLlib's ``callbacks()``: a callbacks class (an ``RLlibCallback`` subclass, RLlib's
        or :class:`impala_rs.RLlibCallback`; a list of them) and hooks given as callables
        (``on_train_result=fn``, or a list of callables). The algorithm's hooks run on the
        driver (``on_algorithm_init``, ``on_train_result``, which may add to the result,
        ``on_evaluate_start/end``, ``on_checkpoint_loaded``); so do the episode hooks
        (``on_episode_created``, ``on_episode_start``, ``on_episode_step``,
        ``on_episode_end``), replayed after each iteration from the episodes the env runners
        recorded (see :mod:`impala_rs.callbacks`; they need local env runners). A callback
        that defines another hook of RLlib's env runners (``on_sample_end``, ...) is refused,
        naming it."""
        from .callbacks import check

        given = {k: (list(v) if isinstance(v, (list, tuple)) else [v]) for k, v in hooks.items() if v is not NotProvided}
        current = self._values.get("callbacks") or {"class": None, "hooks": {}}
        cls = current["class"] if callbacks_class is NotProvided else callbacks_class
        merged = {**current["hooks"], **given}
        check(cls, merged)
        self._values["callbacks"] = {"class": cls, "hooks": merged}
        return self

    def get_default_rl_module_spec(self):
        """What impala-rs builds (RLlib's ``get_default_rl_module_spec()``): an
        :class:`impala_rs.RLModuleSpec` with no module class of its own (the catalog model) and
        the model options as ``DefaultModelConfig`` fields."""
        from .rl_module import default_spec

        return default_spec(self.to_dict()["model"])

    def framework(self, framework="torch", **kwargs):
        """RLlib's ``framework()``: impala-rs runs on libtorch, so only ``"torch"`` is
        accepted; ``precision`` is ``"fp32"`` (the default) or ``"bf16-mixed"`` (the learner's
        convolutions and matrix products in bfloat16 with float32 weights, optimizer state and
        loss, on CPUs with AVX512-BF16 or AMX and GPUs with bfloat16 convolutions; env runners
        infer in float32)."""
        if framework != "torch":
            raise TypeError(
                f"framework({framework!r}): impala-rs runs on libtorch only; remove the call or "
                "use framework('torch')"
            )
        return self._update("framework", kwargs)

    # --- dict-style access --------------------------------------------------------------------

    def to_dict(self):
        """Every option by name, flat like RLlib's ``to_dict()``, the model as a dict under
        ``model``; Tune search spaces stay as given."""
        out = copy.deepcopy(_DEFAULTS)
        out["callbacks"] = None
        for key, value in self._values.items():
            if key == "callbacks":
                out[key] = {"class": value["class"], "hooks": dict(value["hooks"])}
                continue
            if key == "model":
                out["model"].update(copy.deepcopy(value))
            else:
                out[key] = value if key == "env" else copy.deepcopy(value)
        return out

    @classmethod
    def from_dict(cls, config_dict):
        """A config from a dict like :meth:`to_dict` returns (or a part of one)."""
        return cls().update_from_dict(config_dict)

    def update_from_dict(self, config_dict):
        """Sets every option of ``config_dict`` (by name or alias, each through its group)."""
        for name, value in dict(config_dict).items():
            if name == "callbacks":
                # Python's own: a class, or what `to_dict` returns for `callbacks()`.
                if isinstance(value, dict):
                    self.callbacks(value.get("class"), **value.get("hooks", {}))
                elif value is not None:
                    self.callbacks(value)
                continue
            key, _ = _canonical(name)
            if key not in _KEYS:
                raise TypeError(_unknown(name))
            self._update(_KEYS[key][0], {name: value})
        return self

    def copy(self, copy_frozen=None):
        """A deep copy (``copy_frozen`` is accepted for RLlib compatibility; configs here are
        never frozen)."""
        return copy.deepcopy(self)

    def __getattr__(self, name):
        if name.startswith("__") or name == "_values":
            raise AttributeError(name)
        key, _ = _canonical(name)
        if key in _KEYS:
            return self.to_dict()[key]
        raise AttributeError(f"IMPALAConfig has no option `{name}`; the nearest is `{_nearest(name)}`")

    def __setattr__(self, name, value):
        key, _ = _canonical(name)
        if key in _KEYS:
            self._update(_KEYS[key][0], {name: value})
        elif name.startswith("_"):
            # The config's own state (`_values`); options that start with `_` are keys above.
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(_unknown(name))

    def __getitem__(self, name):
        key, _ = _canonical(name)
        if key not in _KEYS:
            raise KeyError(_unknown(name))
        return self.to_dict()[key]

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"IMPALAConfig({shown})"

    # --- checking and building --------------------------------------------------------------

    def validate(self):
        """Checks every option as ``impala train`` checks a config file; raises one
        :class:`impala_rs.ConfigError` whose ``problems`` lists every problem."""
        self._checked()

    def build_algo(self, env=None):
        """The algorithm (RLlib's ``build_algo()``); ``env`` overrides the config's env."""
        from .algorithm import Impala

        config = self if env is None else self.copy().environment(env)
        return Impala(config)

    #: RLlib's older name of :meth:`build_algo`.
    build = build_algo

    # --- internals ----------------------------------------------------------------------------

    def _update(self, group, kwargs):
        for name, value in kwargs.items():
            if value is NotProvided:
                continue
            key, deprecated = _canonical(name)
            if key not in _KEYS:
                raise TypeError(f"{group}(): {_unknown(name)}")
            expected_group = _KEYS[key][0]
            if expected_group != group and NEW_STACK_GROUPS.get(name) != group:
                raise TypeError(
                    f"`{name}` is set by `{expected_group}()`, not `{group}()`; write "
                    f".{expected_group}({name}=...)"
                )
            if deprecated:
                warnings.warn(f"`{name}` is deprecated (RLlib's old name); use `{key}`", stacklevel=3)
            if key in _SCHEDULED and _is_schedule(value):
                # RLlib's new stack takes `lr` / `entropy_coeff` as `[[timestep, value], ...]`:
                # the schedule option, starting from its first value.
                self._values[_SCHEDULED[key]] = copy.deepcopy(value)
                self._values[key] = value[0][1]
                continue
            if key == "model":
                if not isinstance(value, dict):
                    raise TypeError(f"training(model=...): expects a dict of model options, got {value!r}")
                unknown = [k for k in value if k not in _MODEL_KEYS]
                if unknown:
                    raise TypeError(f"training(model=...): {_unknown('model.' + unknown[0])}")
                merged = dict(self._values.get("model", {}))
                merged.update(copy.deepcopy(value))
                value = merged
            elif key != "env":
                value = copy.deepcopy(value)
            self._values[key] = value
        return self

    def _env_creator(self):
        """``(name, creator)``: the Python creator the env workers call (a class or callable
        given as ``env``, or one given to ``register_env``), or ``(env, None)``."""
        env = self._values.get("env", _DEFAULTS["env"])
        if isinstance(env, str):
            return env, find_creator(env)
        if callable(env):
            return getattr(env, "__name__", type(env).__name__), env
        raise TypeError(
            f"environment(env={env!r}): expects an env id, an entry point 'pkg.module:Name', a "
            "name given to register_env, or a gymnasium.Env subclass or creator"
        )

    def _callbacks(self):
        """The run's callbacks (:class:`impala_rs.callbacks.Callbacks`)."""
        from .callbacks import Callbacks

        given = self._values.get("callbacks") or {"class": None, "hooks": {}}
        return Callbacks(given["class"], given["hooks"], self["metrics_num_episodes_for_smoothing"])

    def _python_models(self):
        """The model dicts whose ``custom_model`` is a class for the package to script (given
        directly or by a name given to ``register_custom_model``): ``None`` for the run's
        model, a policy id for a policy's own (``policy_config``)."""
        values = self.to_dict()
        models = {None: values["model"]}
        for policy_id, entries in (values.get("policy_config") or {}).items():
            if isinstance(entries.get("model"), dict):
                models[policy_id] = entries["model"]
        return {key: model for key, model in models.items() if python_model(model) is not None}

    def _native_dict(self):
        """The config as the Rust side reads it: the env by name; search spaces refused; a
        model class to script left out (``Impala`` scripts it and names the file)."""
        out = self.to_dict()
        out.pop("callbacks")  # Python's own: the algorithm calls them
        out["env"] = self._env_creator()[0]
        spaces = [f"`{k}` is a Ray Tune search space ({s})" for k, v in out.items() if (s := _search_space(v))]
        spaces += [
            f"`model.{k}` is a Ray Tune search space ({s})"
            for k, v in out["model"].items()
            if (s := _search_space(v))
        ]
        if spaces:
            message = (
                f"{len(spaces)} problem(s) in the config:\n"
                + "\n".join(f"  - {p}" for p in spaces)
                + "\nsearch spaces are resolved by Ray Tune: pass the config to "
                "tune.Tuner(impala_rs.tune.Impala, param_space=config)"
            )
            error = _impala_rs.ConfigError(message)
            error.problems = spaces
            raise error
        for model in [out["model"]] + [e["model"] for e in out.get("policy_config", {}).values() if isinstance(e.get("model"), dict)]:
            if python_model(model) is not None:
                model["custom_model"] = None
                model["custom_model_config"] = {}
        _resolve_multi_agent_callables(out, self._env_creator()[1])
        return out

    def _checked(self):
        """The native dict, validated (warnings emitted); raises ConfigError."""
        native = self._native_dict()
        for warning in _impala_rs.check_config(native):
            warnings.warn(warning, stacklevel=3)
        return native


def _policy_ids(policies):
    """RLlib's ``policies`` as ``(ids, {id: config})``: a dict's keys with its specs' ``config``
    (training and model options of that policy; a spec must not set anything else), a set's
    sorted members, a list as given."""
    if isinstance(policies, dict):
        configs = {}
        for policy_id, spec in policies.items():
            overrides = {
                k: v
                for k in ("policy_class", "observation_space", "action_space")
                if (v := getattr(spec, k, None)) is not None
            }
            if spec is not None and overrides:
                raise TypeError(
                    f"multi_agent(policies=...): the spec of {policy_id!r} sets {sorted(overrides)}; "
                    "each policy takes its spaces from the agents mapped to it and its network "
                    "from `model` (or its spec's config={'model': {...}}), so leave them None"
                )
            config = getattr(spec, "config", None)
            if config:
                configs[policy_id] = dict(config)
        return list(policies), configs
    if isinstance(policies, (set, frozenset)):
        return sorted(policies), {}
    if isinstance(policies, (list, tuple)):
        return list(policies), {}
    raise TypeError(f"multi_agent(policies=...): expects policy ids (a list, set or dict), got {policies!r}")


def _agent_ids(env, env_config, creator):
    """The agent ids of a multi-agent env, in its order: a native one's, or those of one env
    built here from a Python creator or entry point (``possible_agents``, or RLlib's
    ``get_agent_ids()``); ``None`` for a single-agent env."""
    agents = _impala_rs.multi_agent_ids(env, env_config)
    if agents is not None:
        return agents
    if creator is None and ":" in env and not env.startswith("ALE/"):
        module, _, name = env.partition(":")
        creator = importlib.import_module(module)
        for part in name.split("."):
            creator = getattr(creator, part)
    if creator is None:
        return None
    try:
        params = [
            p
            for p in inspect.signature(creator).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    made = creator(env_config) if len(params) == 1 else creator(**env_config)
    try:
        if hasattr(made, "possible_agents"):
            return [str(a) for a in made.possible_agents]
        if callable(getattr(made, "get_agent_ids", None)):
            return sorted(str(a) for a in made.get_agent_ids())
        return None
    finally:
        close = getattr(made, "close", None)
        if callable(close):
            close()


def _resolve_multi_agent_callables(out, creator):
    """Calls a ``policy_mapping_fn`` once per agent id of the env and a ``policies_to_train``
    callable once per policy id, leaving the tables the Rust side reads."""
    mapping, to_train = out.get("policy_mapping"), out.get("policies_to_train")
    if callable(mapping):
        agents = _agent_ids(out["env"], out.get("env_config") or {}, creator)
        if agents is None:
            raise _impala_rs.ConfigError(
                f"multi_agent(policy_mapping_fn=...) is set, but {out['env']!r} is a single-agent env"
            )
        table = {}
        for agent in agents:
            policy = mapping(agent, None)
            if not isinstance(policy, str):
                raise TypeError(f"policy_mapping_fn({agent!r}, None) returned {policy!r}, not a policy id")
            table[agent] = policy
        out["policy_mapping"] = table
    if callable(to_train):
        ids = out.get("policies") or ["default_policy"]
        out["policies_to_train"] = [p for p in ids if to_train(p, None)]


#: RLlib's new-stack spellings set by another group than the option they stand for here
#: (RLlib 2.60's `learners()` takes the aggregator settings).
NEW_STACK_GROUPS = {
    "num_aggregator_actors_per_learner": "learners",
    "max_requests_in_flight_per_aggregator_actor": "learners",
}


#: Options RLlib's new stack also takes as a schedule, and the option that holds it here.
_SCHEDULED = {"lr": "lr_schedule", "entropy_coeff": "entropy_coeff_schedule"}


def _is_schedule(value):
    """Whether ``value`` is a schedule, ``[[timestep, value], ...]`` (not a Tune search space)."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value)
    )


def _nearest(name):
    return _impala_rs.nearest_key(name)


def _unknown(name):
    return f"unknown option `{name}`; the nearest valid key is `{_nearest(name)}`"
