"""RLlib's new API stack model settings: ``DefaultModelConfig``, ``RLModuleSpec`` and
``MultiRLModuleSpec`` as ``config.rl_module(...)`` takes them, read into impala-rs' model
options (RLlib's catalog: the MLP, CNN and LSTM the Rust learner trains).

The classes here have RLlib's fields and defaults, for code without Ray; RLlib's own classes
(``ray.rllib.core.rl_module``) are read the same way, by their fields. Every field either maps
to a model option or, set to anything but RLlib's default, is refused by name: a setting is
never silently dropped. A spec's own ``module_class`` (the user's ``TorchRLModule``) becomes the
run's custom model: built, converted to TorchScript (``rl_module_torchscript``) and trained by
the Rust learner like any ``custom_model``.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .rl_module_torchscript import is_rl_module_class

#: DefaultModelConfig field -> impala-rs model option.
_MAPPED = {
    "fcnet_hiddens": "fcnet_hiddens",
    "fcnet_activation": "fcnet_activation",
    "conv_filters": "conv_filters",
    "conv_activation": "conv_activation",
    "head_fcnet_hiddens": "post_fcnet_hiddens",
    "head_fcnet_activation": "post_fcnet_activation",
    "vf_share_layers": "vf_share_layers",
    "use_lstm": "use_lstm",
    "max_seq_len": "max_seq_len",
    "lstm_cell_size": "lstm_cell_size",
    "free_log_std": "free_log_std",
}

#: Fields the catalog here has no counterpart for, with RLlib's default (the only value taken).
_DEFAULT_ONLY = {
    "fcnet_use_layernorm": False,
    "head_fcnet_use_layernorm": False,
    "log_std_clip_param": 20.0,
    "lstm_use_prev_action": False,
    "lstm_use_prev_reward": False,
    "fusionnet_hiddens": [256, 256],
    "fusionnet_activation": "tanh",
}
for _layer in ("fcnet", "conv", "head_fcnet", "lstm", "fusionnet"):
    for _part in ("kernel", "bias"):
        _DEFAULT_ONLY[f"{_layer}_{_part}_initializer"] = None
        _DEFAULT_ONLY[f"{_layer}_{_part}_initializer_kwargs"] = None


@dataclass
class DefaultModelConfig:
    """RLlib's ``DefaultModelConfig`` (``ray.rllib.core.rl_module.default_model_config``): the
    fields that map to impala-rs' models, with RLlib's defaults (note ``vf_share_layers=True``,
    the new stack's default)."""

    fcnet_hiddens: List[int] = field(default_factory=lambda: [256, 256])
    fcnet_activation: str = "tanh"
    fcnet_use_layernorm: bool = False
    conv_filters: Optional[List[Any]] = None
    conv_activation: str = "relu"
    head_fcnet_hiddens: List[int] = field(default_factory=list)
    head_fcnet_activation: str = "relu"
    head_fcnet_use_layernorm: bool = False
    free_log_std: bool = False
    log_std_clip_param: float = 20.0
    vf_share_layers: bool = True
    use_lstm: bool = False
    max_seq_len: int = 20
    lstm_cell_size: int = 256
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False


@dataclass
class RLModuleSpec:
    """RLlib's ``RLModuleSpec``: ``module_class=None`` is impala-rs' catalog model, built from
    ``model_config``; the spaces come from the env."""

    module_class: Optional[type] = None
    observation_space: Any = None
    action_space: Any = None
    inference_only: bool = False
    model_config: Optional[Dict[str, Any]] = None
    catalog_class: Optional[type] = None


@dataclass
class MultiRLModuleSpec:
    """RLlib's ``MultiRLModuleSpec``: an ``RLModuleSpec`` per policy (module) id."""

    rl_module_specs: Dict[str, RLModuleSpec] = field(default_factory=dict)
    multi_rl_module_class: Optional[type] = None


def model_fields(model_config):
    """A ``DefaultModelConfig`` (RLlib's or this one), or a dict, as a dict of its fields."""
    if model_config is None:
        return {}
    if isinstance(model_config, dict):
        return dict(model_config)
    if dataclasses.is_dataclass(model_config):
        return {f.name: getattr(model_config, f.name) for f in dataclasses.fields(model_config)}
    raise TypeError(
        f"rl_module(model_config=...): expects a DefaultModelConfig or a dict, got "
        f"{type(model_config).__name__}"
    )


def model_options(model_config, where="rl_module(model_config=...)"):
    """impala-rs' model options for a ``DefaultModelConfig`` or a dict of its fields. A field
    without a counterpart here, set to anything but RLlib's default, is refused by name."""
    options = {}
    for name, value in model_fields(model_config).items():
        if name in _MAPPED:
            options[_MAPPED[name]] = value
        elif name in _DEFAULT_ONLY:
            if value != _DEFAULT_ONLY[name]:
                raise TypeError(
                    f"{where}: `{name}={value!r}` has no counterpart in impala-rs' models (it "
                    f"takes RLlib's default, {_DEFAULT_ONLY[name]!r}); remove it, or give a "
                    "custom model (training(model={'custom_model': YourTorchModule}))"
                )
        else:
            known = ", ".join(sorted(_MAPPED))
            raise TypeError(
                f"{where}: unknown DefaultModelConfig field `{name}`; the fields that map to "
                f"impala-rs' models are {known}"
            )
    return options


#: RLlib's own default modules for IMPALA, which the catalog here stands for.
_RLLIB_DEFAULTS = {"DefaultPPOTorchRLModule", "DefaultAPPOTorchRLModule", "DefaultIMPALATorchRLModule"}


def _module_class(spec):
    """The spec's own module class; ``None`` for none or one of RLlib's default modules (the
    catalog model here)."""
    module_class = getattr(spec, "module_class", None)
    if module_class is None or getattr(module_class, "__name__", "") in _RLLIB_DEFAULTS:
        return None
    if not is_rl_module_class(module_class):
        raise TypeError(
            f"rl_module(rl_module_spec=RLModuleSpec(module_class={module_class!r})): expects an "
            "RLModule subclass (ray.rllib.core.rl_module.torch.TorchRLModule with "
            "ValueFunctionAPI); a torch.nn.Module model goes to training(model={'custom_model': cls})"
        )
    return module_class


def _spec_model(spec, where):
    """The model options of one ``RLModuleSpec``: the catalog's from its ``model_config``, or
    its own module class (trained as a custom model, its ``model_config`` given as is)."""
    module_class = _module_class(spec)
    config = getattr(spec, "model_config", None)
    if module_class is None:
        return model_options(config, f"{where}(model_config=...)")
    if dataclasses.is_dataclass(config):
        config = model_fields(config)
    if config is not None and not isinstance(config, dict):
        raise TypeError(f"{where}(module_class={module_class.__name__}, model_config={config!r}): expects a dict")
    return {"custom_model": module_class, "custom_model_config": dict(config or {})}


def spec_settings(rl_module_spec):
    """``(model options, {policy id: model options})`` for an ``RLModuleSpec`` or a
    ``MultiRLModuleSpec``: the run's model, and each policy's own for a multi-spec."""
    specs = getattr(rl_module_spec, "rl_module_specs", None)
    if specs is None:
        return _spec_model(rl_module_spec, "rl_module(rl_module_spec=RLModuleSpec"), {}
    per_policy = {}
    for policy_id, spec in dict(specs).items():
        where = f"rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={{{policy_id!r}: RLModuleSpec"
        per_policy[policy_id] = _spec_model(spec, where)
    return {}, per_policy


def default_spec(model):
    """The ``RLModuleSpec`` impala-rs builds for the model options ``model``: the user's
    module class with its ``model_config``, or the catalog model (``module_class=None``) with
    those options as ``DefaultModelConfig`` fields."""
    if is_rl_module_class(model.get("custom_model")):
        return RLModuleSpec(module_class=model["custom_model"], model_config=dict(model.get("custom_model_config") or {}))
    back = {option: name for name, option in _MAPPED.items()}
    config = {back[k]: v for k, v in model.items() if k in back}
    return RLModuleSpec(module_class=None, model_config=config)
