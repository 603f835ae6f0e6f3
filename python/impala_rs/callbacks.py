"""RLlib's callbacks (``config.callbacks(...)``): the algorithm's hooks, called on the driver
around ``train()``, ``evaluate()`` and restores, and the episode hooks, with a
``metrics_logger`` whose values land in the result.

RLlib calls its episode hooks (``on_episode_created``, ``on_episode_start``,
``on_episode_step``, ``on_episode_end``) inside its env runners, between env steps.
impala-rs' env runners are Rust threads that never wait for Python: when a callback defines an
episode hook, they record every episode they play, and ``train()`` replays the iteration's
episodes to the hooks on the driver after the iteration, in the order they were counted (see
:mod:`impala_rs.episode`). So the hooks see every episode whole and in order, but they run
after the fact: they cannot change what the env runners do, and ``env``, ``env_runner``,
``rl_module`` (and the old stack's ``worker``, ``base_env``, ``policies``) are None. Values
they log go to the result under ``env_runners/<key>``, ``episode.custom_metrics`` under
``custom_metrics/<key>_mean``, ``_min`` and ``_max``, as RLlib's.

RLlib's other env-runner hooks (``on_sample_end``, ``on_environment_created``, ...) have no
replay (they would need the runners' envs or batches in Python), so a callback that defines one
is refused when the config is set, naming the hook, instead of being silently never called.
"""

import collections
import inspect
import math
import traceback

from .episode import episode_of

#: The hooks called around the algorithm's own calls (RLlib's keyword arguments).
ALGORITHM_HOOKS = (
    "on_algorithm_init",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_checkpoint_loaded",
)

#: The hooks called for each episode the env runners played, replayed after the iteration.
EPISODE_HOOKS = (
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
)

#: RLlib's hooks that run in its env runners (or its old stack's policies), not called here.
ENV_RUNNER_HOOKS = (
    "on_environment_created",
    "on_sample_end",
    "on_env_runners_recreated",
    "on_sub_environment_created",
    "on_postprocess_trajectory",
    "on_learn_on_batch",
    "on_create_policy",
)

#: The hooks called here.
HOOKS = ALGORITHM_HOOKS + EPISODE_HOOKS


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

    def on_episode_created(self, *, episode, metrics_logger=None, env_index, **kwargs):
        pass

    def on_episode_start(self, *, episode, metrics_logger=None, env_index, **kwargs):
        pass

    def on_episode_step(self, *, episode, metrics_logger=None, env_index, **kwargs):
        pass

    def on_episode_end(self, *, episode, metrics_logger=None, env_index, **kwargs):
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
            "threads that do not call Python; of their hooks, the episode hooks are replayed on "
            "the driver after each iteration (" + ", ".join(EPISODE_HOOKS) + "), and "
            "per-episode metrics are in the result (`env_runners/episode_return_mean`, ...); "
            "the algorithm's hooks run here too: " + ", ".join(ALGORITHM_HOOKS)
        )
    if hook not in HOOKS:
        raise TypeError(f"{where}: `{hook}` is no callback hook; the hooks run here are " + ", ".join(HOOKS))


def put_at_path(node, path, value):
    """Sets ``value`` in the nested dict ``node`` under the parts of ``path``, making the
    dicts on the way (a result's ``"a/b"`` key as ``node["a"]["b"]``)."""
    *parents, leaf = path
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


class _Values:
    """One key's logged values, as its reduction needs them: the last ``window`` of them, or
    (without a window) a running reduction of all of them, so a key logged for every episode
    keeps no list that grows with the run."""

    def __init__(self, reduce, window, clear_on_reduce):
        self.reduce = reduce
        self.window = collections.deque(maxlen=int(window)) if window else None
        self.clear_on_reduce = clear_on_reduce
        self.clear()

    def clear(self):
        if self.window is not None:
            self.window.clear()
        self.count = 0
        self.running = None

    def add(self, value):
        self.count += 1
        if self.window is not None:
            self.window.append(value)
        elif self.count == 1 or self.reduce is None:
            self.running = value
        elif self.reduce in ("mean", "sum"):
            self.running = self.running + value
        else:
            self.running = min(self.running, value) if self.reduce == "min" else max(self.running, value)

    def reduced(self):
        if self.window is not None:
            return MetricsLogger._REDUCE[self.reduce](list(self.window))
        return self.running / self.count if self.reduce == "mean" else self.running


class MetricsLogger:
    """RLlib's ``MetricsLogger``, as the hooks use it: ``log_value(key, value, reduce=...,
    window=..., clear_on_reduce=...)`` collects values that are reduced into the next result
    (``key`` a string, ``"a/b"``, or a tuple of path parts): over the last ``window`` values;
    without a window over every value logged (RLlib's mean without one is a moving average),
    or over those since the last result with ``clear_on_reduce``. ``peek(key)`` reads a
    reduced value."""

    _REDUCE = {
        "mean": lambda v: sum(v) / len(v),
        "min": min,
        "max": max,
        "sum": sum,
        None: lambda v: v[-1],
    }

    def __init__(self):
        self._values = {}

    @staticmethod
    def _path(key):
        return tuple(key) if isinstance(key, (list, tuple)) else tuple(str(key).split("/"))

    def log_value(self, key, value, reduce="mean", window=None, ema_coeff=None, clear_on_reduce=False):
        if reduce not in self._REDUCE:
            raise ValueError(f"log_value(reduce={reduce!r}): expects 'mean', 'min', 'max', 'sum' or None")
        path = self._path(key)
        values = self._values.get(path)
        if values is None:
            values = self._values[path] = _Values(reduce, window, clear_on_reduce)
        values.add(value)

    def peek(self, key, default=None):
        values = self._values.get(self._path(key))
        if values is None or not values.count:
            return default
        return values.reduced()

    def reduce_into(self, result):
        """Writes every logged value, reduced, into ``result`` under its path."""
        for path, values in self._values.items():
            if not values.count:
                continue
            put_at_path(result, path, values.reduced())
            if values.clear_on_reduce:
                values.clear()


class _EpisodeSummary:
    """The old stack's ``episode.custom_metrics`` and ``hist_data``, summarized as RLlib's
    ``summarize_episodes`` does: over the iteration's episodes, or over the last
    ``metrics_num_episodes_for_smoothing`` episodes when the iteration had fewer."""

    def __init__(self, smoothing):
        self._recent = collections.deque(maxlen=max(int(smoothing), 1))
        self._this_iteration = []

    def add(self, episode):
        entry = (episode.custom_metrics, episode.hist_data)
        self._recent.append(entry)
        self._this_iteration.append(entry)

    def reduce_into(self, result):
        """``custom_metrics/<key>_mean``, ``_min`` and ``_max`` (NaN values left out), where
        RLlib's old stack results have them: at the top and under ``env_runners``, with
        ``env_runners/hist_stats/<key>``."""
        episodes = self._this_iteration
        if len(episodes) < self._recent.maxlen:
            episodes = list(self._recent)
        self._this_iteration = []
        metrics = collections.defaultdict(list)
        hist_stats = collections.defaultdict(list)
        for custom_metrics, hist_data in episodes:
            for key, value in custom_metrics.items():
                metrics[key].append(value)
            for key, values in hist_data.items():
                hist_stats[key] += values
        summary = {}
        for key, values in metrics.items():
            kept = [v for v in map(float, values) if not math.isnan(v)]
            summary[f"{key}_mean"] = sum(kept) / len(kept) if kept else math.nan
            summary[f"{key}_min"] = min(kept) if kept else math.nan
            summary[f"{key}_max"] = max(kept) if kept else math.nan
        env_runners = result.setdefault("env_runners", {})
        if summary:
            result.setdefault("custom_metrics", {}).update(summary)
            env_runners.setdefault("custom_metrics", {}).update(summary)
        if hist_stats:
            env_runners.setdefault("hist_stats", {}).update(hist_stats)


class Callbacks:
    """The run's callbacks: instances of the config's classes and its keyword hooks, called in
    that order; an error in one names the hook, the callback and where it was raised."""

    def __init__(self, callbacks_class, hooks, metrics_num_episodes_for_smoothing=100):
        classes = callbacks_class if isinstance(callbacks_class, (list, tuple)) else [callbacks_class]
        objects = [cls() for cls in classes if cls is not None]
        # Each hook's functions, found once: episode hooks are called per episode and step.
        self._functions = {
            hook: [getattr(o, hook) for o in objects if hook in defined_hooks(type(o))] + list(hooks.get(hook, []))
            for hook in HOOKS
        }
        self.metrics_logger = MetricsLogger()
        #: What the episode hooks log: reduced into the result's `env_runners`, where RLlib's
        #: env runners' metrics go.
        self.episode_metrics_logger = MetricsLogger()
        self._episodes = _EpisodeSummary(metrics_num_episodes_for_smoothing)

    def __bool__(self):
        return any(self._functions.values())

    @property
    def replays_episodes(self):
        """Whether some callback defines an episode hook (the env runners then record)."""
        return any(self._functions[hook] for hook in EPISODE_HOOKS)

    def call(self, hook, **kwargs):
        """Calls ``hook`` on every callback with RLlib's keyword arguments."""
        if hook != "on_checkpoint_loaded":
            # RLlib passes its metrics logger to every hook but this one.
            kwargs["metrics_logger"] = self.metrics_logger
        _call_each(hook, self._functions[hook], kwargs)

    def replay_episodes(self, records, result):
        """Replays recorded episodes (``Algorithm.take_episodes()``) to the episode hooks, one
        after the other: ``on_episode_created`` (before the reset), ``on_episode_start``
        (after it), ``on_episode_step`` after each step (only when some callback defines it),
        ``on_episode_end`` (the whole episode). One episode object goes through all of them.
        Then writes what they logged, and the episodes' custom metrics, into the iteration's
        ``result`` (which ``on_train_result`` sees with them, as in RLlib)."""
        created, start, step, end = (self._functions[hook] for hook in EPISODE_HOOKS)
        for record in records:
            episode = episode_of(record)
            kwargs = {
                "episode": episode,
                "env_runner": None,
                "metrics_logger": self.episode_metrics_logger,
                "env": None,
                "env_index": episode.env_index,
                "rl_module": None,
                # The old stack's, for `DefaultCallbacks` signatures that name them.
                "worker": None,
                "base_env": None,
                "policies": None,
            }
            if created:
                episode._show(0, reset=False)
                _call_each("on_episode_created", created, kwargs)
            episode._show(0)
            if start:
                _call_each("on_episode_start", start, kwargs)
            if step:
                for _ in episode._steps():
                    _call_each("on_episode_step", step, kwargs)
            episode._show_end()
            if end:
                _call_each("on_episode_end", end, dict(kwargs, prev_episode_chunks=[]))
            self._episodes.add(episode)
        self.episode_metrics_logger.reduce_into(result.setdefault("env_runners", {}))
        self._episodes.reduce_into(result)


def _call_each(hook, functions, kwargs):
    """Calls each of ``functions`` with ``kwargs``; an exception gets a note naming the hook,
    the callback and the line of the callback it came through."""
    for function in functions:
        try:
            function(**kwargs)
        except Exception as error:
            if hasattr(error, "add_note"):
                error.add_note(_raised_by(hook, function, error))
            raise


def _raised_by(hook, function, error):
    name = getattr(function, "__qualname__", repr(function))
    # The traceback's first frame is `_call_each`'s; the next one is the callback's.
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({frames[1].filename}:{frames[1].lineno})" if len(frames) > 1 else ""
    return f"raised by the `{hook}` callback {name}{where}"
