"""``register_env``: RLlib's way of naming a user's env creator.

A creator is a ``gymnasium.Env`` subclass (built with ``env_config`` as keyword arguments) or a
callable taking the ``env_config`` dict (RLlib's convention). It runs in env worker processes,
so it is pickled with cloudpickle (which Gymnasium installs): classes and functions defined in a
script or notebook travel by value, those of importable modules by reference.
"""

import os
import pickle
import sys
import tempfile
import weakref

_CREATORS = {}


def register_env(name, creator):
    """Names an env creator so ``.environment(name)`` trains on it (RLlib's
    ``tune.register_env``). Once ``impala_rs.tune`` is imported it is also registered with Ray
    Tune, so Tune's trial processes find it too."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_env: the name must be a non-empty str, got {name!r}")
    if not callable(creator):
        raise TypeError(
            f"register_env({name!r}, ...): the creator must be a gymnasium.Env subclass or a "
            f"callable taking the env_config dict, got {type(creator).__name__}"
        )
    _CREATORS[name] = creator
    if "impala_rs.tune" in sys.modules:
        register_with_tune(name, creator)


def register_with_tune(name, creator):
    """Registers a creator with Ray Tune too, so Tune's trial processes find it (done by
    ``impala_rs.tune`` for every creator, so plain use never pays for importing Ray)."""
    from ray.tune.registry import register_env as ray_register_env

    ray_register_env(name, creator)


def registered_envs():
    """The names given to :func:`register_env` in this process."""
    return sorted(_CREATORS)


def find_creator(name):
    """The creator registered as ``name`` here or with Ray Tune (in a Tune trial process);
    ``None`` for ids and entry points."""
    if name in _CREATORS:
        return _CREATORS[name]
    return find_in_tune("ENV_CREATOR", name)


def find_in_tune(category, name):
    """What Ray Tune's registry holds as ``name`` in ``category`` (``"ENV_CREATOR"``,
    ``"RLLIB_MODEL"``); ``None`` without Ray or a registration. Ray is only looked at once
    imported, so the package never imports it."""
    if "ray" not in sys.modules:
        return None
    try:
        from ray.tune import registry
    except ImportError:
        return None
    try:
        kind = getattr(registry, category)
        if registry._global_registry.contains(kind, name):
            return registry._global_registry.get(kind, name)
    except Exception:  # noqa: BLE001 - no Ray session: nothing registered there
        return None
    return None


class PickledCreator:
    """A creator pickled into a private temporary file for the env workers, removed when this
    object goes away (the algorithm's lifetime); ``data`` holds the pickled bytes. Where
    ``/proc`` exists the file is unlinked at once and reached through this process's open
    descriptor (``/proc/PID/fd/N``), so it is gone with the process even when that is killed."""

    def __init__(self, name, creator):
        try:
            import cloudpickle
        except ImportError as exc:
            raise ImportError(
                f"the env {name!r} is a Python creator, which needs cloudpickle (installed with "
                "gymnasium): pip install gymnasium"
            ) from exc
        try:
            # The env workers (impala-gym's worker) read this process's sys.path first, so what
            # the creator references by module imports there as it does here.
            data = pickle.dumps(list(sys.path)) + cloudpickle.dumps(creator)
        except Exception as exc:
            raise TypeError(
                f"the env creator {name!r} cannot be pickled for the env worker processes: "
                f"{type(exc).__name__}: {exc}; define it at module level"
            ) from exc
        self._write(data)

    @classmethod
    def from_data(cls, data):
        """A private file of another process's pickled creator (``data``), e.g. on a Ray
        env runner actor's host."""
        pickled = cls.__new__(cls)
        pickled._write(data)
        return pickled

    def _write(self, data):
        self.data = data
        fd, path = tempfile.mkstemp(prefix="impala_rs_env_", suffix=".pkl")
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
        held = f"/proc/{os.getpid()}/fd/{fd}"
        if os.path.exists(held):
            # The env workers open it by the descriptor's path while this process lives.
            os.remove(path)
            self.path = held
            self._cleanup = weakref.finalize(self, os.close, fd)
        else:
            os.close(fd)
            self.path = path
            self._cleanup = weakref.finalize(self, _remove, path)

    def remove(self):
        self._cleanup()


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
