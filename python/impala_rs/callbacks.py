"""RLlib's callbacks (``config.callbacks(...)``): the algorithm's hooks, called on the driver
around ``train()``, ``evaluate()`` and restores, with a ``metrics_logger`` whose values land in
the result.

RLlib's env-runner hooks (``on_episode_*``, ``on_sample_end``, ``on_environment_created``, ...)
run inside RLlib's env runners; impala-rs' env runners are Rust threads that never call into
Python, so a callback that defines one is refused when the config is set, naming the hook,
instead of being silently never called.
"""

import inspect

#: The hooks called here, and the keyword arguments each gets (RLlib's, keyword-only).
ALGORITHM_HOOKS = (
    "on_algorithm_init",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_checkpoint_loaded",
)

#: RLlib's hooks that run in its env runners (or its old stack's policies), not called here.
ENV_RUNNER_HOOKS = (
    "on_environment_created",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_sample_end",
    "on_env_runners_recreated",
    "on_sub_environment_created",
    "on_postprocess_trajectory",
    "on_learn_on_batch",
    "on_create_policy",
)


class RLlibCallback:
    """RLlib's ``RLlibCallback`` base (``ray.rllib.callbacks.callbacks``), for code without
    Ray: every hook does nothing until a subclass defines it. RLlib's own base class works the
    same way."""

    def on_algorithm_init(self, *, algorithm, metrics_logger=None, **kwargs):
        pass

    def on_train_result(self, *, algorithm, metrics_logger=None, result, **kwargs):
        pass

    def on_evaluate_start(self, *, algorithm, metrics_logger=None, **kwargs):
        pass

    def on_evaluate_end(self, *, algorithm, metrics_logger=None, evaluation_metrics, **kwargs):
        pass

    def on_checkpoint_loaded(self, *, algorithm, **kwargs):
        pass


#: The old stack's name of the base class.
DefaultCallbacks = RLlibCallback


def _is_base(cls):
    """RLlib's base classes (and this one), whose hooks are no-ops."""
    return cls is RLlibCallback or cls is object or cls.__module__.startswith("ray.rllib.")


def defined_hooks(cls):
    """The hooks a callback class defines itself (not the base classes' no-ops)."""
    hooks = set()
    for klass in inspect.getmro(cls):
        if _is_base(klass):
            continue
        hooks.update(name for name in vars(klass) if name.startswith("on_"))
    return hooks


def check(callbacks_class, hooks):
    """Refuses what cannot be called here: env-runner hooks, and names that are no hook."""
    classes = callbacks_class if isinstance(callbacks_class, (list, tuple)) else [callbacks_class]
    for cls in (c for c in classes if c is not None):
        if not inspect.isclass(cls):
            raise TypeError(f"callbacks({cls!r}): expects a callbacks class (an RLlibCallback subclass)")
        for hook in sorted(defined_hooks(cls)):
            _check_hook(hook, f"{cls.__name__}.{hook}")
    for hook, functions in hooks.items():
        _check_hook(hook, f"callbacks({hook}=...)")
        for function in functions:
            if not callable(function):
                raise TypeError(f"callbacks({hook}=...): expects a callable or a list of them, got {function!r}")


def _check_hook(hook, where):
    if hook in ENV_RUNNER_HOOKS:
        raise TypeError(
            f"{where}: `{hook}` runs in RLlib's env runners, and impala-rs' env runners are Rust "
            "threads that do not call Python; per-episode metrics are in the result "
            "(`env_runners/episode_return_mean`, ...); algorithm-level hooks run here: "
            + ", ".join(ALGORITHM_HOOKS)
        )
    if hook not in ALGORITHM_HOOKS:
        raise TypeError(f"{where}: `{hook}` is no callback hook; the hooks run here are " + ", ".join(ALGORITHM_HOOKS))


class MetricsLogger:
    """RLlib's ``MetricsLogger``, as the driver's hooks use it: ``log_value(key, value,
    reduce=..., window=...)`` collects values that are reduced into the next result (``key``
    a string, ``"a/b"``, or a tuple of path parts); ``peek(key)`` reads a reduced value."""

    _REDUCE = {
        "mean": lambda v: sum(v) / len(v),
        "min": min,
        "max": max,
        "sum": sum,
        None: lambda v: v[-1],
    }

    def __init__(self):
        self._values = {}

    def log_value(self, key, value, reduce="mean", window=None, ema_coeff=None, clear_on_reduce=False):
        if reduce not in self._REDUCE:
            raise ValueError(f"log_value(reduce={reduce!r}): expects 'mean', 'min', 'max', 'sum' or None")
        path = tuple(key) if isinstance(key, (list, tuple)) else tuple(str(key).split("/"))
        entry = self._values.setdefault(path, {"values": [], "reduce": reduce, "window": window})
        entry["values"].append(value)
        if window:
            del entry["values"][: -int(window)]

    def peek(self, key, default=None):
        path = tuple(key) if isinstance(key, (list, tuple)) else tuple(str(key).split("/"))
        entry = self._values.get(path)
        if entry is None or not entry["values"]:
            return default
        return self._REDUCE[entry["reduce"]](entry["values"])

    def reduce_into(self, result):
        """Writes every logged value, reduced, into ``result`` under its path."""
        for path, entry in self._values.items():
            if not entry["values"]:
                continue
            node = result
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = self._REDUCE[entry["reduce"]](entry["values"])


class Callbacks:
    """The run's callbacks: instances of the config's classes and its keyword hooks, called in
    that order; an error in one names the hook and the callback."""

    def __init__(self, callbacks_class, hooks):
        classes = callbacks_class if isinstance(callbacks_class, (list, tuple)) else [callbacks_class]
        self._objects = [cls() for cls in classes if cls is not None]
        self._hooks = {name: list(functions) for name, functions in hooks.items()}
        self.metrics_logger = MetricsLogger()

    def __bool__(self):
        return bool(self._objects or self._hooks)

    def call(self, hook, **kwargs):
        """Calls ``hook`` on every callback with RLlib's keyword arguments."""
        functions = [getattr(o, hook) for o in self._objects if hook in defined_hooks(type(o))]
        functions += self._hooks.get(hook, [])
        if hook != "on_checkpoint_loaded":
            # RLlib passes its metrics logger to every hook but this one.
            kwargs["metrics_logger"] = self.metrics_logger
        for function in functions:
            try:
                function(**kwargs)
            except Exception as error:
                name = getattr(function, "__qualname__", repr(function))
                if hasattr(error, "add_note"):
                    error.add_note(f"raised by the `{hook}` callback {name}")
                raise
