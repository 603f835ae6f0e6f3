"""``register_custom_model``: RLlib's way of naming a user's torch model class, and how such a
class becomes the TorchScript file the Rust learner and env runners run.

``model.custom_model`` takes a registered name, a ``torch.nn.Module`` subclass, the built-in
``"impala_resnet"`` or the path of a TorchScript file. The last two go to the core as they are.
A class (given directly or by name) is built as RLlib's ``ModelCatalog`` builds it,
``cls(obs_space, action_space, num_outputs, model_config, name, **custom_model_config)``, with
the spaces of the run's env after its wrappers, then scripted with ``torch.jit.script`` and
saved; the core gets that file. The module's contract (``forward(obs) -> (logits, value)``,
recurrent modules with a state) is the core's TorchScript contract, in the package README.

The file is saved under the user's cache folder (``$XDG_CACHE_HOME/impala_rs/models``, by
default ``~/.cache/impala_rs/models``), named after the class and a digest of the module's
architecture, spaces and ``custom_model_config``: the same config always names the same file,
so a checkpoint's config (which records the file) restores into an algorithm built again from
the class, and ``Impala.from_checkpoint`` and ``impala evaluate --checkpoint`` find it later.
"""

import copy
import difflib
import hashlib
import json
import os
import sys
import tempfile
import warnings
from typing import List

from . import rl_module_torchscript
from ._impala_rs import ConfigError, ImpalaError
from .registry import find_in_tune
from .rl_module_torchscript import is_rl_module_class

#: The model names the core builds itself.
BUILTIN_MODELS = ("impala_resnet",)
#: RLlib's name for the model it builds (``ModelCatalog.get_model_v2``'s ``name``).
MODEL_NAME = "default_model"

_MODELS = {}


def register_custom_model(model_name: str, model_class: type) -> None:
    """Names a ``torch.nn.Module`` subclass so ``training(model={"custom_model": model_name})``
    trains it (RLlib's ``ModelCatalog.register_custom_model``). Once ``impala_rs.tune`` is
    imported it is also registered with Ray Tune, so Tune's trial processes find it too."""
    if not isinstance(model_name, str) or not model_name:
        raise TypeError(f"register_custom_model: the name must be a non-empty str, got {model_name!r}")
    if model_name in BUILTIN_MODELS:
        raise ValueError(
            f"register_custom_model({model_name!r}, ...): {model_name!r} is the built-in model's "
            "name; choose another"
        )
    if not isinstance(model_class, type):
        raise TypeError(
            f"register_custom_model({model_name!r}, ...): expects a torch.nn.Module subclass, "
            f"got {model_class!r}"
        )
    _MODELS[model_name] = model_class
    if "impala_rs.tune" in sys.modules:
        register_with_tune(model_name, model_class)


def registered_models() -> List[str]:
    """The names given to :func:`register_custom_model` in this process."""
    return sorted(_MODELS)


def register_with_tune(name, model_class):
    """Registers a model class with Ray Tune too, where RLlib registers its own, so Tune's
    trial processes find it (done by ``impala_rs.tune`` for every class)."""
    from ray.tune.registry import RLLIB_MODEL, _global_registry

    _global_registry.register(RLLIB_MODEL, name, model_class)


def find_model(name):
    """The class registered as ``name`` here or with Ray Tune (in a Tune trial process, or by
    RLlib's ``ModelCatalog.register_custom_model``); ``None`` when there is none."""
    if name in _MODELS:
        return _MODELS[name]
    return find_in_tune("RLLIB_MODEL", name)


def python_model(model):
    """``(label, class)`` when the model dict's ``custom_model`` is a class to script (given
    directly or by a registered name), else ``None`` (no custom model, ``"impala_resnet"`` or
    a TorchScript file: the core's to build). Raises :class:`ConfigError` for a name that is
    none of these and for values of the wrong type."""
    custom = model.get("custom_model")
    if custom is None:
        return None
    problems = []
    found = None
    if isinstance(custom, type):
        found = (custom.__qualname__, custom)
    elif isinstance(custom, str):
        cls = find_model(custom)
        if cls is not None:
            found = (custom, cls)
        elif custom not in BUILTIN_MODELS and not os.path.isfile(custom):
            problems.append(_unknown_model(custom))
    else:
        problems.append(
            f"`model.custom_model` is {custom!r} ({type(custom).__name__}); set a name given to "
            "impala_rs.register_custom_model, a torch.nn.Module subclass, \"impala_resnet\" or the "
            "path of a TorchScript file"
        )
    options = model.get("custom_model_config")
    if found is not None and options is not None and not isinstance(options, dict):
        problems.append(
            f"`model.custom_model_config` is {options!r}; it must be a dict (its entries are the "
            f"keyword arguments of {found[0]})"
        )
    if problems:
        error = ConfigError(
            f"{len(problems)} problem(s) in the config:\n" + "\n".join(f"  - {p}" for p in problems)
        )
        error.problems = problems
        raise error
    return found


def _unknown_model(name):
    registered = registered_models()
    known = ", ".join(repr(n) for n in registered) if registered else "none yet"
    nearest = difflib.get_close_matches(name, registered + list(BUILTIN_MODELS), n=1)
    hint = f"did you mean {nearest[0]!r}? Otherwise " if nearest else ""
    return (
        f"`model.custom_model` is {name!r}, which is neither a registered model (registered: "
        f"{known}), nor a built-in one ({', '.join(repr(n) for n in BUILTIN_MODELS)}), nor a "
        f"TorchScript file (no file at that path); {hint}register the class with "
        f"impala_rs.register_custom_model({name!r}, cls) first, or pass the class itself"
    )


def script_model(label, cls, spec, model_config, seed=None):
    """Builds ``cls`` for the env of ``spec`` (the dict ``_impala_rs.env_spec`` returns) as
    RLlib's ``ModelCatalog`` does, scripts it and saves it; returns the file's path.

    ``model_config`` is the run's model dict (RLlib's ``config["model"]``, defaults included),
    its ``custom_model_config`` the keyword arguments. With a ``seed`` the initial weights are
    drawn from it, without touching the caller's torch random state."""
    torch = _import("torch", "torch==2.11.0", label)
    obs_space = _observation_space(spec["observation_space"], label)
    action_space = _gym_space(spec["action_space"], label)
    num_outputs = _num_outputs(spec["action_space"])
    options = dict(model_config.get("custom_model_config") or {})
    if is_rl_module_class(cls):
        scripted = _rl_module_script(cls, spec, options, seed)
        digest = _digest(cls, scripted, spec, num_outputs, options, seed)
        return _save(torch, scripted, f"{cls.__name__}-{digest}.pt")
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        instance = _build(label, cls, (obs_space, action_space, num_outputs, copy.deepcopy(model_config)), options)
    if not isinstance(instance, torch.nn.Module):
        raise ImpalaError(
            f"model.custom_model {label}: the class built a {type(instance).__name__}, not a "
            "torch.nn.Module; subclass torch.nn.Module"
        )
    try:
        with warnings.catch_warnings():
            # PyTorch deprecates TorchScript for torch.export, whose programs libtorch cannot
            # train yet; the user can do nothing about it here.
            warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
            scripted = torch.jit.script(instance)
    except Exception as exc:
        raise ImpalaError(
            f"model.custom_model {label}: torch.jit.script failed, and impala-rs trains the "
            "model as TorchScript; make the module scriptable (type-annotate forward's "
            "arguments, use only TorchScript's subset of Python, see "
            "https://docs.pytorch.org/docs/stable/jit_language_reference.html). TorchScript "
            f"said:\n{exc}"
        ) from exc
    digest = _digest(cls, scripted, spec, num_outputs, options, seed)
    return _save(torch, scripted, f"{cls.__name__}-{digest}.pt")


def rl_module_instance(cls, spec, model_config, seed=None):
    """The user's RLModule ``cls`` built for the env of ``spec`` (the spaces its TorchScript
    form was traced with) and its ``model_config``, initial weights drawn from ``seed`` as
    :func:`script_model` draws them."""
    label = cls.__qualname__
    torch = _import("torch", "torch==2.11.0", label)
    obs_space = _observation_space(spec["observation_space"], label)
    action_space = _gym_space(spec["action_space"], label)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        return _rl_module(label, rl_module_torchscript.build, cls, obs_space, action_space, model_config)


def _rl_module_script(cls, spec, options, seed):
    """A user's RLModule class, built and converted to the core's TorchScript contract."""
    module = rl_module_instance(cls, spec, options, seed)
    torch = _import("torch", "torch==2.11.0", cls.__qualname__)
    with torch.random.fork_rng(devices=[]):
        return _rl_module(cls.__qualname__, rl_module_torchscript.to_torchscript, module, module.observation_space.shape)


def _rl_module(label, step, *args):
    """``step(*args)``, its :class:`RLModuleError` raised as the ``ImpalaError`` of the spec."""
    try:
        return step(*args)
    except rl_module_torchscript.RLModuleError as exc:
        raise ImpalaError(f"rl_module(rl_module_spec=RLModuleSpec(module_class={label})): {exc}") from exc


def _import(module, requirement, label):
    try:
        return __import__(module)
    except ImportError as exc:
        raise ImportError(
            f"model.custom_model {label} is a Python class, which impala-rs builds and scripts "
            f"with {module}: install it (pip install {requirement})"
        ) from exc


def _build(label, cls, args, options):
    """``cls(*args, name, **options)``, falling back to ``cls(*args, name)`` when the class takes
    no such keyword arguments, as RLlib's ``ModelCatalog`` does (with its warning)."""
    call = (
        f"{cls.__qualname__}(obs_space, action_space, num_outputs={args[2]}, model_config, "
        f"name={MODEL_NAME!r}{''.join(f', {k}={v!r}' for k, v in options.items())})"
    )
    try:
        try:
            return cls(*args, MODEL_NAME, **options)
        except TypeError as exc:
            if not options or "__init__() got an unexpected " not in str(exc):
                raise
            instance = cls(*args, MODEL_NAME)
            warnings.warn(
                f"{cls.__qualname__} should accept all custom options (custom_model_config) as "
                "**kwargs; it was built without them",
                stacklevel=2,
            )
            return instance
    except Exception as exc:
        raise ImpalaError(
            f"model.custom_model {label}: building {call} raised {type(exc).__name__}: {exc}"
        ) from exc


def _gym_space(space, label):
    """The gymnasium space of an ``env_spec`` space dict."""
    gym = _import("gymnasium", "gymnasium", label)
    np = _import("numpy", "numpy", label)
    kind = space["type"]
    if kind == "Discrete":
        return gym.spaces.Discrete(space["n"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(space["nvec"])
    if kind == "Bytes":
        return gym.spaces.Box(0, 255, tuple(space["shape"]), np.uint8)
    shape = tuple(space["shape"])
    low = np.asarray(space["low"], np.float32).reshape(shape)
    high = np.asarray(space["high"], np.float32).reshape(shape)
    return gym.spaces.Box(low, high, shape, np.float32)


def _observation_space(space, label):
    """The space of the tensors ``forward`` gets, as RLlib's models see it: discrete
    observations one-hot (a 0-1 ``Box`` of width ``sum(n)``, the env's space as its
    ``original_space``), other spaces as the env has them."""
    original = _gym_space(space, label)
    if space["type"] not in ("Discrete", "MultiDiscrete"):
        return original
    gym = _import("gymnasium", "gymnasium", label)
    np = _import("numpy", "numpy", label)
    width = space["n"] if space["type"] == "Discrete" else sum(space["nvec"])
    one_hot = gym.spaces.Box(0.0, 1.0, (width,), np.float32)
    one_hot.original_space = original
    return one_hot


def _num_outputs(space):
    """RLlib's logits width for an action space: Discrete ``n``, MultiDiscrete ``sum(nvec)``, a
    Box the mean and log-std of each dimension."""
    if space["type"] == "Discrete":
        return space["n"]
    if space["type"] == "MultiDiscrete":
        return sum(space["nvec"])
    return 2 * len(space["low"])


def _digest(cls, scripted, spec, num_outputs, options, seed):
    """What makes two scripted modules the same: the class, its TorchScript code and parameter
    shapes, the spaces, the constructor's options and the seed of the initial weights."""
    parts = [f"{cls.__module__}.{cls.__qualname__}", repr(spec), str(num_outputs), f"seed:{seed}"]
    parts.append(json.dumps(options, sort_keys=True, default=repr))
    for name, module in scripted.named_modules():
        try:
            code = module.code
        except (AttributeError, RuntimeError):  # a container without forward (ModuleList)
            code = ""
        parts.append(f"{name}:{module.original_name}:{code}")
    for name, tensor in list(scripted.named_parameters()) + list(scripted.named_buffers()):
        parts.append(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def model_dir():
    """Where scripted models are saved: ``$XDG_CACHE_HOME/impala_rs/models``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "impala_rs", "models")


def _save(torch, scripted, filename):
    """Saves ``scripted`` as ``filename`` unless a module of that name (the same digest) is
    there already: a checkpoint records the module's bytes, so building again from the same
    class must find the same file, not a copy with freshly drawn weights."""
    folder = model_dir()
    path = os.path.join(folder, filename)
    if os.path.isfile(path):
        return path
    try:
        os.makedirs(folder, exist_ok=True)
        # Written under a temporary name and renamed, so a run loading the file never reads it
        # half-written.
        fd, partial = tempfile.mkstemp(prefix=".", suffix=".pt", dir=folder)
        os.close(fd)
        try:
            scripted.save(partial)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    except OSError as exc:
        raise ImpalaError(
            f"cannot save the scripted model in {folder}: {exc}; set XDG_CACHE_HOME to a "
            "writable folder"
        ) from exc
    return path
