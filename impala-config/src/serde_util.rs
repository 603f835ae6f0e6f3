//! Serde helpers shared by the config structs.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

/// Whether a string spells "no value" (`none`, `None`, `null`, `~`): TOML has no null, and
/// Python users write `None`.
pub(crate) fn is_none_word(s: &str) -> bool {
    matches!(s.to_ascii_lowercase().as_str(), "none" | "null" | "~")
}

/// Deserializes an optional scalar that may also be written as the string `"none"`, so that a
/// TOML file can turn off an option whose default is `Some` (e.g. `grad_clip = "none"`).
pub(crate) fn none_or<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) if is_none_word(&s) => Ok(None),
        other => T::deserialize(other).map(Some).map_err(D::Error::custom),
    }
}
