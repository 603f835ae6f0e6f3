"""Env runners as Ray actors (``env_runner_backend="ray"``): RLlib's remote env runners on the
Ray cluster the user already has.

Each actor runs the Rust env runner in its own process (``_impala_rs.run_env_runner``) and
connects back to the learner's runner server over the transport ``impala env-runner`` uses,
with a token made for the run (held in memory, handed to the actors, never written to a file
or logged). The actors get ``num_cpus_per_env_runner``, ``num_gpus_per_env_runner`` and
``custom_resources_per_env_runner`` as RLlib's do, in a placement group laid out by
``placement_strategy`` (inside a Ray Tune trial, the trial's own group, which reserves their
bundles). An actor that dies (its node removed, its process killed) is a failed env runner:
the learner's side restarts its slot per ``restart_failed_env_runners`` and counts it, and a new
actor is started to take the slot, wherever Ray finds room.
"""

import logging
import os
import secrets
import sys
import threading

from . import _impala_rs
from .registry import PickledCreator

_log = logging.getLogger(__name__)

#: How long a wait for a dead actor takes before the watcher checks whether it should stop.
_WATCH_INTERVAL_S = 0.5


def _actor_class():
    """The actor class, made on first use so the package never imports Ray by itself."""
    global _ACTOR
    if _ACTOR is None:
        import ray

        # Two calls at once: `run` blocks for the whole run (the interpreter lock released),
        # `node_id` answers meanwhile.
        @ray.remote(max_restarts=0, max_concurrency=2)
        class EnvRunnerActor:
            def run(self, connect, token, creator_data, tls_ca):
                """Serves the learner at ``connect`` until its run is over (over TLS trusting
                ``tls_ca``, the run's certificate, when given); the env workers build the env
                with the pickled creator (this host's private copy)."""
                creator = PickledCreator.from_data(creator_data) if creator_data is not None else None
                try:
                    path = creator.path if creator is not None else None
                    return _impala_rs.run_env_runner(connect, token, path, sys.executable, tls_ca)
                finally:
                    if creator is not None:
                        creator.remove()

            def node_id(self):
                return ray.get_runtime_context().get_node_id()

        _ACTOR = EnvRunnerActor
    return _ACTOR


_ACTOR = None


class RayEnvRunners:
    """``num_env_runners`` env runner actors serving one run; ``server`` is what the native
    ``Algorithm`` takes them from. Start it before building the algorithm (which waits up to
    ``env_runner_connect_timeout_s`` for them) and ``stop()`` it after stopping the algorithm."""

    def __init__(self, native, creator):
        try:
            import ray
        except ImportError as exc:
            raise ImportError(
                'env_runner_backend="ray" places env runners on a Ray cluster, which needs Ray: '
                "pip install 'ray[tune]'"
            ) from exc
        if not ray.is_initialized():
            ray.init()
        self._ray = ray
        self._num = native["num_env_runners"]
        self._restart = native["restart_failed_env_runners"]
        self._restarts_left = native["max_num_env_runner_restarts"]
        # The run's token: in memory here and in the actors' calls, never in a file or a log.
        self._token = secrets.token_hex(32)
        # The pickled creator's bytes travel to each actor, which writes its own copy.
        self._creator = creator.data if creator is not None else None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._actors = {}
        self._runs = {}
        self._own_group = None
        try:
            self.server = _impala_rs.RunnerServer(native, "0.0.0.0:0", self._token)
            self._connect = f"{ray.util.get_node_ip_address()}:{self.server.port}"
            self._group, self._first_bundle = self._placement_group(native)
            for index in range(self._num):
                self._start(index)
        except BaseException:
            self.stop()
            raise
        self._watcher = threading.Thread(target=self._watch, name="impala-ray-runners", daemon=True)
        self._watcher.start()

    def _placement_group(self, native):
        """The group the actors go into and the index of their first bundle: the Tune trial's
        (its bundle 0 is the driver's), or one made here from the config's runner bundles and
        ``placement_strategy``."""
        from ray.util.placement_group import get_current_placement_group, placement_group

        current = get_current_placement_group()
        if current is not None and len(current.bundle_specs) > self._num:
            return current, 1
        bundles, strategy = _impala_rs.resource_bundles(native)
        runner_bundles = [{k: v for k, v in b.items() if v > 0} for b in bundles[1 : 1 + self._num]]
        if not runner_bundles[0]:
            # Actors that ask for nothing (`num_cpus_per_env_runner = 0`) have nothing to place:
            # Ray refuses empty bundles, and schedules such actors anywhere.
            return None, 0
        group = placement_group(runner_bundles, strategy=strategy)
        self._own_group = group
        timeout = native["env_runner_connect_timeout_s"]
        ready, _ = self._ray.wait([group.ready()], timeout=timeout)
        if not ready:
            raise _impala_rs.ImpalaError(
                f"the Ray cluster could not place {self._num} env runner bundle(s) of "
                f"{runner_bundles[0]} with placement_strategy {strategy} within "
                f"env_runner_connect_timeout_s ({timeout} s); add nodes or resources, lower "
                "num_env_runners or num_cpus_per_env_runner, or use placement_strategy PACK or SPREAD"
            )
        return group, 0

    def _start(self, index):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._group is None:
            strategy, bundle = "DEFAULT", {}
        else:
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._group,
                placement_group_bundle_index=self._first_bundle + index,
                placement_group_capture_child_tasks=False,
            )
            bundle = self._group.bundle_specs[self._first_bundle + index]
        resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
        actor = _actor_class().options(
            num_cpus=bundle.get("CPU", 0),
            num_gpus=bundle.get("GPU", 0),
            resources=resources,
            scheduling_strategy=strategy,
        ).remote()
        with self._lock:
            self._actors[index] = actor
            run = actor.run.remote(self._connect, self._token, self._creator, self.server.tls_ca)
            self._runs[run] = index

    def _watch(self):
        """Starts a new actor for each one that died while the run goes on (the learner's
        side has already failed its slot and waits for a runner to take it)."""
        ray = self._ray
        while not self._stopping.is_set():
            with self._lock:
                refs = list(self._runs)
            if not refs:
                self._stopping.wait(_WATCH_INTERVAL_S)
                continue
            done, _ = ray.wait(refs, num_returns=1, timeout=_WATCH_INTERVAL_S)
            for ref in done:
                with self._lock:
                    index = self._runs.pop(ref, None)
                if index is None:
                    return  # stopped meanwhile
                try:
                    ray.get(ref)
                    continue  # the run is over: nothing to replace
                except Exception as exc:  # noqa: BLE001 - any actor death is a runner failure
                    failure = exc
                if self._stopping.is_set():
                    return
                if not self._restart or self._restarts_left <= 0:
                    _log.warning("env runner actor %d failed and is not restarted: %s", index + 1, failure)
                    continue
                self._restarts_left -= 1
                _log.warning("env runner actor %d failed (%s); starting a new one", index + 1, failure)
                self._start(index)

    def node_ids(self):
        """The Ray node of each live actor, by runner index (for placement checks)."""
        with self._lock:
            actors = dict(self._actors)
        return {i: self._ray.get(a.node_id.remote()) for i, a in actors.items()}

    def stop(self):
        """Tells the actors that the run is over and kills any left, their placement group
        and the token file with them; idempotent."""
        self._stopping.set()
        watcher = getattr(self, "_watcher", None)
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()
        server = getattr(self, "server", None)
        if server is not None:
            server.finish("the run stopped")
        with self._lock:
            actors, self._actors, self._runs = list(self._actors.values()), {}, {}
        for actor in actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._own_group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._own_group)
            except Exception:  # noqa: BLE001 - the cluster is already gone
                pass
            self._own_group = None
