//! Which config entry names a TorchScript module: the run's `model.custom_model`, or a
//! policy's own `policy_config.<policy>.model.custom_model`. Checkpoints and remote sessions
//! keep each module with its owner and point that entry at their copy.

use impala_config::ImpalaConfig;

/// Where a module comes from in a config: its owner is `None` for the run's
/// `model.custom_model`, or `Some(policy)` for `policy_config.<policy>.model.custom_model`, a
/// policy's model of its own (a `MultiRLModuleSpec` of module classes).
pub(crate) type ModuleOwner = Option<String>;

/// The owner of policy `policy_id`'s module in `config`: the policy when its own
/// `policy_config` entry names one, else the run.
pub(crate) fn module_owner(config: &ImpalaConfig, policy_id: &str) -> ModuleOwner {
    policy_model(config, policy_id)
        .is_some_and(|model| model.contains_key("custom_model"))
        .then(|| policy_id.to_string())
}

/// `owner`'s `custom_model` in `config`.
pub(crate) fn custom_model_of<'c>(
    config: &'c ImpalaConfig,
    owner: Option<&str>,
) -> Option<&'c str> {
    match owner {
        None => config.model.custom_model.as_deref(),
        Some(policy) => policy_model(config, policy)?.get("custom_model")?.as_str(),
    }
}

/// Points `owner`'s `custom_model` in `config` at `path`.
pub(crate) fn set_custom_model(config: &mut ImpalaConfig, owner: Option<&str>, path: String) {
    match owner {
        None => config.model.custom_model = Some(path),
        Some(policy) => {
            let entry = config.policy_config.entry(policy.to_string()).or_default();
            let model = entry
                .entry("model".to_string())
                .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
            if let serde_json::Value::Object(model) = model {
                model.insert("custom_model".into(), serde_json::Value::String(path));
            }
        }
    }
}

/// The `model` table of policy `policy_id`'s `policy_config` entry.
fn policy_model<'c>(
    config: &'c ImpalaConfig,
    policy_id: &str,
) -> Option<&'c serde_json::Map<String, serde_json::Value>> {
    config.policy_config.get(policy_id)?.get("model")?.as_object()
}
