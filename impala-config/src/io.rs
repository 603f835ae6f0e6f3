//! Config files (TOML, YAML, JSON), `to_dict`, `set` and `key=value` overrides.
//!
//! Every path into an [`ImpalaConfig`] checks keys the same way: aliases are resolved (RLlib's
//! deprecated spellings return a [`Warning`]), an unknown key is an error naming the nearest
//! valid key, and a value of the wrong type is an error naming the key, what it accepts and,
//! for files, the line and column.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use impala_core::suggest::{did_you_mean, nearest};
use serde_json::Value;

use crate::diagnostics::{Warning, WarningKind};
use crate::error::{ConfigError, Origin, Position, Result};
use crate::keys::{self, alias, key_info, model_key_info, Group};
use crate::serde_util::is_none_word;
use crate::ImpalaConfig;

/// A config file format, chosen by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// `.toml`.
    Toml,
    /// `.yaml` or `.yml`.
    Yaml,
    /// `.json`.
    Json,
}

impl ConfigFormat {
    /// The format of `path`, from its extension.
    ///
    /// ```
    /// use impala_config::ConfigFormat;
    /// assert_eq!(ConfigFormat::from_path("cartpole.yml")?, ConfigFormat::Yaml);
    /// assert!(ConfigFormat::from_path("cartpole.ini").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Result<ConfigFormat> {
        let path = path.as_ref();
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("toml") => Ok(ConfigFormat::Toml),
            Some("yaml" | "yml") => Ok(ConfigFormat::Yaml),
            Some("json") => Ok(ConfigFormat::Json),
            _ => Err(ConfigError::UnknownFormat { path: path.to_path_buf() }),
        }
    }
}

impl fmt::Display for ConfigFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigFormat::Toml => "TOML",
            ConfigFormat::Yaml => "YAML",
            ConfigFormat::Json => "JSON",
        })
    }
}

/// A config read from a file or a dict, with the warnings reading it produced (deprecated key
/// spellings). Validate it next with [`ImpalaConfig::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The config.
    pub config: ImpalaConfig,
    /// Warnings about how it was written.
    pub warnings: Vec<Warning>,
    /// An RLlib experiment file's stop criteria (`stop: {...}`), as given; none for a flat
    /// config.
    pub stop: Vec<(crate::StopKey, f64)>,
}

impl ImpalaConfig {
    /// Reads a config file; the format comes from the extension. Keys left out keep their
    /// defaults. The file is flat like RLlib's `to_dict()`, with the model in a `model` table.
    ///
    /// A file that is not UTF-8 text is [`ConfigError::NotText`] (with where its first bad byte
    /// is); a file without a single key is [`ConfigError::EmptyFile`] (an empty file would
    /// silently mean the library defaults). Every unknown key and wrongly typed value of the
    /// file is reported, in file order: one is [`ConfigError::UnknownKey`] or
    /// [`ConfigError::WrongType`], several are [`ConfigError::Several`].
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("impala.yaml");
    /// std::fs::write(&path, "lr: 0.001\nnum_workers: 4\nmodel:\n  fcnet_hiddens: [64, 64]\n")?;
    /// let loaded = ImpalaConfig::load(&path)?;
    /// assert_eq!(loaded.config.num_env_runners, 4);
    /// assert_eq!(loaded.warnings.len(), 1); // `num_workers` is deprecated
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Loaded> {
        let path = path.as_ref();
        let format = ConfigFormat::from_path(path)?;
        let bytes = std::fs::read(path)
            .map_err(|cause| ConfigError::Io { path: path.to_path_buf(), cause })?;
        let text = text_of(path, bytes)?;
        parse(&text, format, &Origin::File(path.to_path_buf()))
    }

    /// Reads a config from `text` in `format`.
    ///
    /// ```
    /// use impala_config::{ConfigError, ConfigFormat, ImpalaConfig};
    /// let err = ImpalaConfig::from_str_as("lr = 0.001\nlearner_queue_size = \"big\"\n", ConfigFormat::Toml)
    ///     .err().ok_or("expected an error")?;
    /// assert!(matches!(err, ConfigError::WrongType { ref key, .. } if key == "learner_queue_size"));
    /// assert!(err.to_string().starts_with("<config text>:2:"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_str_as(text: &str, format: ConfigFormat) -> Result<Loaded> {
        parse(text, format, &Origin::Text)
    }

    /// Builds a config from a flat dict like the one [`ImpalaConfig::to_dict`] returns, with
    /// the same key checks as files.
    pub fn from_dict(dict: BTreeMap<String, Value>) -> Result<Loaded> {
        Self::from_dict_as(dict, Origin::Set)
    }

    /// [`ImpalaConfig::from_dict`] with errors that name `origin`: where the caller's values
    /// came from (a builder method, a trial).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use impala_config::{ImpalaConfig, Origin};
    /// let dict = BTreeMap::from([("lr".to_string(), serde_json::json!("fast"))]);
    /// let err = ImpalaConfig::from_dict_as(dict, Origin::Named("training()".into()))
    ///     .err().ok_or("expected an error")?;
    /// assert!(err.to_string().starts_with("training(): `lr` expects a number"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_dict_as(dict: BTreeMap<String, Value>, origin: Origin) -> Result<Loaded> {
        let root = Value::Object(dict.into_iter().collect());
        let mut problems = Problems::default();
        let warnings = check_keys(&root, None, &origin, &mut problems)?;
        let typed = serde_path_to_error::deserialize(&root)
            .map_err(|e| wrong_type(&e.path().to_string(), e.inner().to_string(), &origin, None));
        match typed {
            Ok(config) if problems.is_empty() => {
                return Ok(Loaded { config, warnings, stop: Vec::new() })
            }
            Ok(_) => {}
            Err(whole) => {
                check_types(&root, None, &origin, &mut problems);
                problems.add_whole_text_error(whole);
            }
        }
        Err(problems.into_error(&origin))
    }

    /// Writes the config to `path`; the format comes from the extension.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let text = self.to_string_as(ConfigFormat::from_path(path)?)?;
        std::fs::write(path, text)
            .map_err(|cause| ConfigError::Io { path: path.to_path_buf(), cause })
    }

    /// The config as text in `format`, every key included. TOML has no null: an option whose
    /// default is a value but that is turned off is written `"none"`, other unset options are
    /// left out.
    ///
    /// ```
    /// use impala_config::{ConfigFormat, ImpalaConfig};
    /// let config = ImpalaConfig::default().training(|t| t.grad_clip(None));
    /// for format in [ConfigFormat::Toml, ConfigFormat::Yaml, ConfigFormat::Json] {
    ///     let text = config.to_string_as(format)?;
    ///     assert_eq!(ImpalaConfig::from_str_as(&text, format)?.config, config);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_string_as(&self, format: ConfigFormat) -> Result<String> {
        let serialize_error = |message: String| ConfigError::Serialize { format, message };
        match format {
            ConfigFormat::Json => {
                serde_json::to_string_pretty(self).map_err(|e| serialize_error(e.to_string()))
            }
            ConfigFormat::Yaml => {
                serde_norway::to_string(self).map_err(|e| serialize_error(e.to_string()))
            }
            ConfigFormat::Toml => {
                let mut table = toml::Table::try_from(self).map_err(|e| {
                    serialize_error(format!(
                        "{e} (TOML integers are signed 64-bit: a larger `seed` needs JSON or YAML)"
                    ))
                })?;
                let default = ImpalaConfig::default().to_dict();
                for (key, value) in self.to_dict() {
                    let turned_off =
                        value.is_null() && default.get(&key).is_some_and(|d| !d.is_null());
                    if turned_off && !table.contains_key(&key) {
                        table.insert(key, toml::Value::String("none".into()));
                    }
                }
                toml::to_string(&table).map_err(|e| serialize_error(e.to_string()))
            }
        }
    }

    /// Every option by its file name, flat like RLlib's `AlgorithmConfig.to_dict()` (the
    /// model is one nested dict under `model`). Unset options are `null`; so are non-finite
    /// numbers, which JSON cannot hold.
    ///
    /// ```
    /// let dict = impala_config::ImpalaConfig::default().to_dict();
    /// assert_eq!(dict["lr"], 0.0005);
    /// assert_eq!(dict["num_env_runners"], 2);
    /// assert_eq!(dict["model"]["fcnet_hiddens"], serde_json::json!([256, 256]));
    /// ```
    pub fn to_dict(&self) -> BTreeMap<String, Value> {
        // Serializing plain data with string keys into a JSON value cannot fail.
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    }

    /// Sets one option by name, as RLlib's dict-style access does. `key` may be an alias, a
    /// model key (`model.fcnet_hiddens`), an `env_config.<name>` entry or a
    /// `custom_resources_per_env_runner.<name>` entry. Optional values accept `null` or
    /// `"none"`. Returns the warnings (a deprecated spelling).
    ///
    /// ```
    /// use impala_config::{ConfigError, ImpalaConfig};
    /// use serde_json::json;
    /// let mut config = ImpalaConfig::default();
    /// let warnings = config.set("num_workers", json!(8))?;
    /// assert_eq!((config.num_env_runners, warnings.len()), (8, 1));
    /// config.set("model.fcnet_hiddens", json!([32]))?;
    /// let err = config.set("lrr", json!(0.1)).err().ok_or("expected an error")?;
    /// assert!(matches!(err, ConfigError::UnknownKey { ref suggestion, .. } if suggestion == "lr"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set(&mut self, key: &str, value: Value) -> Result<Vec<Warning>> {
        self.set_from(key, value, &Origin::Set)
    }

    /// Applies one command-line override, `key=value` or `group.key=value` (`training.lr=0.001`,
    /// `env_runners.num_env_runners=4`, `model.fcnet_hiddens=[64,64]`). The value is read as
    /// JSON, then as a TOML value (`inf`, `{ a = 1 }`), and otherwise taken as a bare string
    /// (`env=CartPole-v1`); it then goes through [`ImpalaConfig::set`].
    ///
    /// ```
    /// use impala_config::{ConfigError, ImpalaConfig};
    /// let mut config = ImpalaConfig::default();
    /// config.apply_override("training.lr=0.001")?;
    /// config.apply_override("env=Acrobot-v1")?;
    /// config.apply_override("grad_clip=none")?;
    /// assert_eq!((config.lr, config.env.as_str(), config.grad_clip), (0.001, "Acrobot-v1", None));
    /// let err = config.apply_override("resources.lr=0.1").err().ok_or("expected an error")?;
    /// assert!(matches!(err, ConfigError::WrongGroup { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_override(&mut self, text: &str) -> Result<Vec<Warning>> {
        self.apply_one_override(text).map(|(_, warnings)| warnings)
    }

    /// [`ImpalaConfig::apply_override`], also returning the top-level key it set, group prefix
    /// and alias resolved (`training.lr=1` -> `lr`, `model.fcnet_hiddens=[8]` -> `model`).
    fn apply_one_override(&mut self, text: &str) -> Result<(String, Vec<Warning>)> {
        let bad =
            |reason: &str| ConfigError::BadOverride { text: text.into(), reason: reason.into() };
        if text.contains(['\n', '\r']) {
            // `lr=0.1\nnum_env_runners=5` would set lr and lose the rest.
            return Err(bad("holds a line break; give each key=value an override of its own"));
        }
        let (lhs, rhs) =
            text.split_once('=').ok_or_else(|| bad("write it as key=value, e.g. lr=0.001"))?;
        let lhs = lhs.trim();
        if lhs.is_empty() {
            return Err(bad("the key is empty; write it as key=value, e.g. lr=0.001"));
        }
        let key = match lhs.split_once('.') {
            Some((head, rest)) => match Group::from_name(head) {
                Some(group) => {
                    check_group(rest, head, group)?;
                    rest
                }
                None => lhs,
            },
            None => lhs,
        };
        let value = parse_override_value(rhs.trim()).map_err(|reason| bad(&reason))?;
        let head = key.split_once('.').map_or(key, |(head, _)| head);
        let target = alias(head).map_or(head, |a| a.canonical).to_string();
        Ok((target, self.set_from(key, value, &Origin::Override(text.into()))?))
    }

    /// Applies `key=value` overrides in order, each as [`ImpalaConfig::apply_override`] does,
    /// and lets a scalar win over the schedule it stands beside: `lr` given without
    /// `lr_schedule` (or `entropy_coeff` without `entropy_coeff_schedule`) removes the schedule
    /// the config had, with a warning. Otherwise the schedule would set the value, as in RLlib,
    /// and the command line's `lr` would do nothing.
    ///
    /// ```
    /// use impala_config::{ConfigFormat, ImpalaConfig};
    /// let text = "lr = 0.0003\nlr_schedule = [[0, 0.0003], [1000, 0.0]]";
    /// let mut config = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?.config;
    /// let warnings = config.apply_overrides(&["lr=0.001"])?;
    /// assert_eq!((config.lr, config.lr_schedule.is_none(), warnings.len()), (0.001, true, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply_overrides<S: AsRef<str>>(&mut self, texts: &[S]) -> Result<Vec<Warning>> {
        let mut warnings = Vec::new();
        let mut targets = Vec::new();
        for text in texts {
            let (target, found) = self.apply_one_override(text.as_ref())?;
            targets.push(target);
            warnings.extend(found);
        }
        let given = |key: &str| targets.iter().any(|t| t == key);
        let schedules = [
            ("lr", "lr_schedule", &mut self.lr_schedule),
            ("entropy_coeff", "entropy_coeff_schedule", &mut self.entropy_coeff_schedule),
        ];
        for (scalar, schedule, slot) in schedules {
            if given(scalar) && !given(schedule) && slot.take().is_some() {
                warnings.push(Warning {
                    key: schedule.into(),
                    kind: WarningKind::ScheduleReplacedByOverride,
                    message: format!(
                        "dropped because `{scalar}` was set on its own, and holds for the whole run (set `{schedule}` too to schedule it)"
                    ),
                });
            }
        }
        Ok(warnings)
    }

    pub(crate) fn set_from(
        &mut self,
        key: &str,
        value: Value,
        origin: &Origin,
    ) -> Result<Vec<Warning>> {
        if let Some((head, rest)) = key.split_once('.') {
            let mut warnings = Vec::new();
            let head = resolve(head, &mut warnings);
            return match head {
                "model" => set_model(self, rest, value, origin).map(|()| warnings),
                "env_config" => {
                    self.env_config.insert(rest.into(), value);
                    Ok(warnings)
                }
                "policy_mapping" => {
                    let policy = serde_json::from_value::<String>(value)
                        .map_err(|e| wrong_type(key, e.to_string(), origin, None))?;
                    self.policy_mapping.insert(rest.into(), policy);
                    Ok(warnings)
                }
                "policy_config" => {
                    // `policy_config.<policy>` takes a table, `policy_config.<policy>.<key>` a
                    // value; `for_policy` checks the keys as the run's config.
                    let (policy, option) = match rest.split_once('.') {
                        Some((policy, option)) => (policy, Some(option)),
                        None => (rest, None),
                    };
                    let entry = self.policy_config.entry(policy.into()).or_default();
                    match option.map(|o| (o, o.strip_prefix("model."))) {
                        Some((_, Some(model_key))) => {
                            let model = entry.entry("model".into()).or_insert(Value::Null);
                            if !model.is_object() {
                                *model = Value::Object(serde_json::Map::new());
                            }
                            if let Value::Object(model) = model {
                                model.insert(model_key.into(), value);
                            }
                        }
                        Some((option, None)) => {
                            entry.insert(option.into(), value);
                        }
                        None => {
                            *entry = serde_json::from_value(value)
                                .map_err(|e| wrong_type(key, e.to_string(), origin, None))?;
                        }
                    }
                    Ok(warnings)
                }
                "custom_resources_per_env_runner" => {
                    let amount = serde_json::from_value::<f64>(value)
                        .map_err(|e| wrong_type(key, e.to_string(), origin, None))?;
                    self.custom_resources_per_env_runner.insert(rest.into(), amount);
                    Ok(warnings)
                }
                _ => Err(unknown_key(key, origin, None)),
            };
        }
        let mut warnings = Vec::new();
        let canonical = resolve(key, &mut warnings);
        let info = key_info(canonical).ok_or_else(|| unknown_key(key, origin, None))?;
        let value = none_word_to_null(info.type_name, value);
        if canonical == "model" {
            self.model = serde_path_to_error::deserialize(value).map_err(|e| {
                wrong_type(&format!("model.{}", e.path()), e.inner().to_string(), origin, None)
            })?;
            return Ok(warnings);
        }
        match keys::set_config_field(self, canonical, value) {
            Some(Ok(())) => Ok(warnings),
            Some(Err(e)) => Err(wrong_type(canonical, e.to_string(), origin, None)),
            None => Err(unknown_key(key, origin, None)),
        }
    }
}

fn set_model(config: &mut ImpalaConfig, key: &str, value: Value, origin: &Origin) -> Result<()> {
    let full = format!("model.{key}");
    let info = model_key_info(key).ok_or_else(|| unknown_key(&full, origin, None))?;
    let value = none_word_to_null(info.type_name, value);
    match keys::set_model_field(&mut config.model, key, value) {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(wrong_type(&full, e.to_string(), origin, None)),
        None => Err(unknown_key(&full, origin, None)),
    }
}

/// `"none"` for an optional key means null.
fn none_word_to_null(type_name: &str, value: Value) -> Value {
    match value {
        Value::String(s) if type_name.starts_with("Option") && is_none_word(&s) => Value::Null,
        other => other,
    }
}

/// The canonical name of `key`, noting a warning when it is a deprecated alias.
fn resolve<'k>(key: &'k str, warnings: &mut Vec<Warning>) -> &'k str {
    match alias(key) {
        Some(a) => {
            if a.deprecated {
                warnings.push(deprecated(a.name, a.canonical));
            }
            a.canonical
        }
        None => key,
    }
}

pub(crate) fn deprecated(old: &str, new: &str) -> Warning {
    Warning {
        key: old.into(),
        kind: WarningKind::DeprecatedKey { old: old.into(), new: new.into() },
        message: format!("`{old}` is deprecated (RLlib renamed it); its value went to `{new}`, write `{new}` instead"),
    }
}

/// Errors when `key` (after a `group.` prefix) is not set by `group`.
fn check_group(key: &str, written: &str, group: Group) -> Result<()> {
    let head = key.split_once('.').map_or(key, |(h, _)| h);
    let canonical = alias(head).map_or(head, |a| a.canonical);
    match key_info(canonical) {
        Some(info) if info.group != group => Err(ConfigError::WrongGroup {
            key: key.into(),
            group: written.into(),
            expected_group: info.group.name().into(),
        }),
        _ => Ok(()),
    }
}

/// Reads an override's value: JSON, else a TOML value, else the bare string.
fn parse_override_value(raw: &str) -> std::result::Result<Value, String> {
    if let Ok(value) = serde_json::from_str::<Value>(raw) {
        return Ok(value);
    }
    if let Ok(mut table) = toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        if let Some(value) = table.remove("v") {
            if let toml::Value::Float(x) = value {
                if !x.is_finite() {
                    return Err(format!(
                        "`{raw}` is not a finite number; config numbers must be finite"
                    ));
                }
            }
            return serde_json::to_value(value).map_err(|e| e.to_string());
        }
    }
    Ok(Value::String(raw.into()))
}

/// The deepest nesting a YAML config may have. The YAML parser's own limit (128) is checked
/// late: a hostile file nested 100,000 deep took 20 s of CPU to refuse.
const MAX_YAML_DEPTH: usize = 64;

/// The line (1-based) where `text` first nests deeper than [`MAX_YAML_DEPTH`], counting flow
/// brackets (`[`, `{` outside quotes and comments) and block indentation levels.
fn yaml_nested_too_deep(text: &str) -> Option<usize> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (number, line) in text.lines().enumerate() {
        let body = line.trim_start_matches(' ');
        if flow == 0 && !body.is_empty() && !body.starts_with('#') {
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&i| i >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut quote: Option<char> = None;
        let mut previous = ' ';
        for c in body.chars() {
            match (quote, c) {
                (Some(q), c) if c == q && previous != '\\' => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') if previous == ' ' => break,
                (None, '[' | '{') => flow += 1,
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
            if indents.len() + flow > MAX_YAML_DEPTH {
                return Some(number + 1);
            }
            previous = c;
        }
        if indents.len() + flow > MAX_YAML_DEPTH {
            return Some(number + 1);
        }
    }
    None
}

/// Reads `text` into a config: first as a generic tree to check its keys, then typed, so that a
/// wrong type is reported with the format's own line and column. When anything is wrong, every
/// key is checked on its own so that all unknown keys and wrong types are reported together.
fn parse(text: &str, format: ConfigFormat, origin: &Origin) -> Result<Loaded> {
    let empty = |origin: &Origin| match origin {
        Origin::File(path) => Err(ConfigError::EmptyFile { path: path.clone(), format }),
        _ => Ok(Loaded { config: ImpalaConfig::default(), warnings: Vec::new(), stop: Vec::new() }),
    };
    if text.trim().is_empty() {
        return empty(origin);
    }
    let syntax = |message: String, position: Option<Position>| ConfigError::Syntax {
        format,
        message,
        origin: origin.clone(),
        position,
    };
    if format == ConfigFormat::Yaml {
        if let Some(line) = yaml_nested_too_deep(text) {
            return Err(syntax(
                format!(
                    "nests more than {MAX_YAML_DEPTH} levels deep (a config nests a few); \
                     refused before parsing, which such depth would make slow"
                ),
                Some(Position { line: u32::try_from(line).unwrap_or(u32::MAX), column: 1 }),
            ));
        }
    }
    let tree: Value =
        match format {
            ConfigFormat::Json => {
                serde_json::from_str(text).map_err(|e| syntax(e.to_string(), json_position(&e)))?
            }
            ConfigFormat::Yaml => serde_norway::from_str(text)
                .map_err(|e| syntax(e.to_string(), yaml_position(&e)))?,
            ConfigFormat::Toml => toml::from_str(text)
                .map_err(|e| syntax(e.message().into(), toml_position(text, &e)))?,
        };
    let no_keys = match &tree {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    if no_keys {
        return empty(origin);
    }
    if let Some(experiment) = crate::experiment_in(&tree, origin)? {
        // The experiment's config, checked as a flat config's keys and values are (without
        // positions in the file: the table is nested there).
        let Value::Object(config) = experiment.config else { return empty(origin) };
        let loaded = ImpalaConfig::from_dict_as(config.into_iter().collect(), origin.clone())?;
        return Ok(Loaded { stop: experiment.stop, ..loaded });
    }
    let mut problems = Problems::default();
    let warnings = check_keys(&tree, Some(text), origin, &mut problems)?;
    let typed = deserialize_text(text, format, origin);
    match typed {
        Ok(config) if problems.is_empty() => {
            return Ok(Loaded { config, warnings, stop: Vec::new() })
        }
        Ok(_) => {}
        Err(first) => {
            check_types(&tree, Some(text), origin, &mut problems);
            problems.add_whole_text_error(first);
        }
    }
    Err(problems.into_error(origin))
}

/// Deserializes the whole text with the format's own deserializer (for its positions).
fn deserialize_text(text: &str, format: ConfigFormat, origin: &Origin) -> Result<ImpalaConfig> {
    match format {
        ConfigFormat::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut de).map_err(|e| {
                wrong_type(
                    &e.path().to_string(),
                    e.inner().to_string(),
                    origin,
                    json_position(e.inner()),
                )
            })
        }
        ConfigFormat::Yaml => serde_path_to_error::deserialize(
            serde_norway::Deserializer::from_str(text),
        )
        .map_err(|e| {
            wrong_type(
                &e.path().to_string(),
                e.inner().to_string(),
                origin,
                yaml_position(e.inner()),
            )
        }),
        ConfigFormat::Toml => serde_path_to_error::deserialize(toml::Deserializer::new(text))
            .map_err(|e| {
                let position = toml_position(text, e.inner());
                wrong_type(&e.path().to_string(), e.inner().message().into(), origin, position)
            }),
    }
}

/// The problems found in one config text, each with where it is (for file order).
#[derive(Default)]
struct Problems {
    /// (where it is written, the index of its top-level key in the tree, the problem).
    found: Vec<(Option<Position>, usize, ConfigError)>,
}

impl Problems {
    fn push(&mut self, position: Option<Position>, order: usize, error: ConfigError) {
        self.found.push((position, order, error));
    }

    fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// Adds the error of the whole-text pass. It knows the exact position of the first wrong
    /// value, which the key-by-key pass found with its key's position only: it replaces that
    /// one. It is kept on its own only when nothing else was found (after an unknown key it is
    /// serde's "unknown field", already reported).
    fn add_whole_text_error(&mut self, whole: ConfigError) {
        let (key, position) = match &whole {
            ConfigError::WrongType { key, position, .. } => (Some(key.as_str()), *position),
            _ => (None, None),
        };
        let same = self.found.iter().position(
            |(_, _, e)| matches!(e, ConfigError::WrongType { key: k, .. } if Some(k.as_str()) == key),
        );
        match same {
            Some(i) => {
                let (old_position, order, _) = self.found[i];
                self.found[i] = (position.or(old_position), order, whole);
            }
            None if self.found.is_empty() => self.found.push((position, usize::MAX, whole)),
            None => {}
        }
    }

    /// One problem as itself; several as [`ConfigError::Several`], in the order they are
    /// written (problems without a position last, in the tree's key order).
    fn into_error(mut self, origin: &Origin) -> ConfigError {
        self.found.sort_by_key(|(p, order, _)| (sort_key(*p), *order));
        let mut errors: Vec<ConfigError> = self.found.into_iter().map(|(_, _, e)| e).collect();
        if errors.len() == 1 {
            if let Some(only) = errors.pop() {
                return only;
            }
        }
        ConfigError::Several { origin: origin.clone(), errors }
    }
}

/// Text of a config file, or where its first byte that is not UTF-8 text is.
fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String> {
    let not_text = |offset: usize, bytes: &[u8]| {
        let before = String::from_utf8_lossy(&bytes[..offset]);
        ConfigError::NotText {
            path: path.to_path_buf(),
            offset,
            byte: bytes[offset],
            position: Position::from_offset(&before, before.len()),
            utf16: bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]),
        }
    };
    // A NUL byte is valid UTF-8 but no config format allows it: the file is binary.
    let nul = bytes.iter().position(|&b| b == 0);
    match String::from_utf8(bytes) {
        Ok(text) => match nul {
            Some(offset) => Err(not_text(offset, text.as_bytes())),
            None => Ok(text),
        },
        Err(e) => {
            let bad = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            Err(not_text(nul.map_or(bad, |n| n.min(bad)), &bytes))
        }
    }
}

fn json_position(e: &serde_json::Error) -> Option<Position> {
    (e.line() > 0).then(|| Position::new(e.line(), e.column()))
}

fn yaml_position(e: &serde_norway::Error) -> Option<Position> {
    e.location().map(|l| Position::new(l.line(), l.column()))
}

fn toml_position(text: &str, e: &toml::de::Error) -> Option<Position> {
    e.span().map(|span| Position::from_offset(text, span.start))
}

/// Checks every key of a config tree: aliases (warnings), duplicates and unknown keys, which go
/// to `problems`. A tree that is not a table is an error at once.
fn check_keys(
    tree: &Value,
    text: Option<&str>,
    origin: &Origin,
    problems: &mut Problems,
) -> Result<Vec<Warning>> {
    let Value::Object(map) = tree else {
        return Err(ConfigError::WrongType {
            key: ".".into(),
            expected: "a table of config keys".into(),
            message: format!("found {tree}"),
            origin: origin.clone(),
            position: None,
        });
    };
    let locate = |key: &str| text.and_then(|t| find_key(t, key));
    let mut warnings = Vec::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (order, (key, value)) in map.iter().enumerate() {
        let canonical = if key_info(key).is_some() {
            key.as_str()
        } else if alias(key).is_some() {
            resolve(key, &mut warnings)
        } else {
            let position = locate(key);
            problems.push(position, order, unknown_key(key, origin, position));
            continue;
        };
        if let Some(other) = seen.insert(canonical, key) {
            // Name the two spellings in file order; the problem is where the second one is.
            let (mut first, mut second) = ((locate(other), other), (locate(key), key.as_str()));
            if sort_key(first.0) > sort_key(second.0) {
                std::mem::swap(&mut first, &mut second);
            }
            let duplicate = ConfigError::DuplicateKey {
                key: canonical.into(),
                first: first.1.into(),
                second: second.1.into(),
                origin: origin.clone(),
            };
            problems.push(second.0, order, duplicate);
        }
        if let (true, Value::Object(model)) = (canonical == "model", value) {
            for bad in model.keys().filter(|k| model_key_info(k).is_none()) {
                let position = locate(bad);
                let unknown = unknown_key(&format!("model.{bad}"), origin, position);
                problems.push(position, order, unknown);
            }
        }
    }
    Ok(warnings)
}

/// Orders positions as they are written; none comes last.
fn sort_key(position: Option<Position>) -> (u32, u32) {
    position.map_or((u32::MAX, u32::MAX), |p| (p.line, p.column))
}

/// Deserializes each known key of `tree` on its own (each model key too) and adds every value
/// of the wrong type to `problems`, with its key's position.
fn check_types(tree: &Value, text: Option<&str>, origin: &Origin, problems: &mut Problems) {
    let Value::Object(map) = tree else { return };
    let locate = |key: &str| text.and_then(|t| find_value(t, key));
    let mut check = |one: Value, order: usize, located: &str| {
        if let Err(e) = serde_path_to_error::deserialize::<_, ImpalaConfig>(one) {
            let position = locate(located);
            let path = e.path().to_string();
            problems.push(
                position,
                order,
                wrong_type(&path, e.inner().to_string(), origin, position),
            );
        }
    };
    for (order, (key, value)) in map.iter().enumerate() {
        let canonical = match alias(key) {
            Some(a) => a.canonical,
            None if key_info(key).is_some() => key.as_str(),
            None => continue,
        };
        match (canonical == "model", value) {
            (true, Value::Object(model)) => {
                for (model_key, v) in model.iter().filter(|(k, _)| model_key_info(k).is_some()) {
                    check(single(key, single(model_key, v.clone())), order, model_key);
                }
            }
            _ => check(single(key, value.clone()), order, key),
        }
    }
}

/// The table `{key: value}`.
fn single(key: &str, value: Value) -> Value {
    Value::Object(std::iter::once((key.to_string(), value)).collect())
}

/// The parser's message without the path and position it repeats (those are fields).
fn bare_message(path: &str, message: &str) -> String {
    let message = message.strip_prefix(&format!("{path}: ")).unwrap_or(message);
    let is_position = |tail: &str| {
        let parts: Vec<&str> = tail.split(" column ").collect();
        parts.len() == 2
            && parts.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let end = message
        .rfind(" at line ")
        .filter(|&i| is_position(&message[i + " at line ".len()..]))
        .unwrap_or(message.len());
    message[..end].to_string()
}

fn wrong_type(
    path: &str,
    message: String,
    origin: &Origin,
    position: Option<Position>,
) -> ConfigError {
    let message = bare_message(path, &message);
    let head = path.split(['.', '[']).next().unwrap_or(path);
    let canonical = alias(head).map_or(head, |a| a.canonical);
    let expected = if canonical == "model" {
        let model_key = path.strip_prefix("model.").and_then(|p| p.split(['.', '[']).next());
        model_key
            .and_then(model_key_info)
            .map_or_else(|| "a table of model options".into(), |i| i.expected())
    } else {
        key_info(canonical).map_or_else(|| "a valid value".into(), |i| i.expected())
    };
    ConfigError::WrongType { key: path.into(), expected, message, origin: origin.clone(), position }
}

fn unknown_key(key: &str, origin: &Origin, position: Option<Position>) -> ConfigError {
    ConfigError::UnknownKey {
        key: key.into(),
        suggestion: nearest_key(key),
        origin: origin.clone(),
        position,
    }
}

/// What other RL libraries (Stable-Baselines3, TorchBeast, Sample Factory, CleanRL, PyTorch)
/// call RLlib's keys: "did you mean" names the key a user of those means, which spelling
/// distance alone would miss (`learning_rate` is nearer to `learner_queue_size` than to `lr`).
const COMMON_NAMES: [(&str, &str); 16] = [
    ("learning_rate", "lr"),
    ("batch_size", "train_batch_size"),
    ("num_envs", "num_envs_per_env_runner"),
    ("n_envs", "num_envs_per_env_runner"),
    ("num_actors", "num_env_runners"),
    ("ent_coef", "entropy_coeff"),
    ("entropy_cost", "entropy_coeff"),
    ("vf_coef", "vf_loss_coeff"),
    ("baseline_cost", "vf_loss_coeff"),
    ("value_loss_coeff", "vf_loss_coeff"),
    ("max_grad_norm", "grad_clip"),
    ("grad_norm_clipping", "grad_clip"),
    ("discount", "gamma"),
    ("unroll_length", "rollout_fragment_length"),
    ("n_steps", "rollout_fragment_length"),
    ("optimizer", "opt_type"),
];

/// The valid key nearest to `key` (aliases suggest the key they set, other libraries' names
/// for a key suggest it; `model.<name>` a model key), for "did you mean" messages.
///
/// ```
/// assert_eq!(impala_config::nearest_key("lrr"), "lr");
/// assert_eq!(impala_config::nearest_key("learning_rate"), "lr");
/// assert_eq!(impala_config::nearest_key("model.fcnet_hidens"), "model.fcnet_hiddens");
/// // A model option written without its group.
/// assert_eq!(impala_config::nearest_key("fcnet_activation"), "model.fcnet_activation");
/// ```
pub fn nearest_key(key: &str) -> String {
    if let Some(&(_, rllib)) = COMMON_NAMES.iter().find(|(name, _)| *name == key) {
        return rllib.to_string();
    }
    if let Some(rest) = key.strip_prefix("model.") {
        let names = keys::model_keys().iter().map(|k| k.name);
        return format!("model.{}", nearest(rest, names).unwrap_or_default());
    }
    let names = || keys::keys().iter().map(|k| k.name).chain(keys::ALIASES.iter().map(|a| a.name));
    if did_you_mean(key, names()).is_none() {
        if let Some(model_key) = did_you_mean(key, keys::model_keys().iter().map(|k| k.name)) {
            return format!("model.{model_key}");
        }
    }
    let found = nearest(key, names()).unwrap_or_default();
    alias(found).map_or(found, |a| a.canonical).to_string()
}

/// Where `key` is written as a key (`key =`, `key:`, `"key":`) in `text`, for formats whose
/// parsers do not report it.
fn find_key(text: &str, key: &str) -> Option<Position> {
    find_key_and_value(text, key).map(|(key, _)| Position::from_offset(text, key))
}

/// Where the value of `key` starts in `text` (where its key is when the value starts on a
/// later line, as a YAML block does).
fn find_value(text: &str, key: &str) -> Option<Position> {
    find_key_and_value(text, key).map(|(_, value)| Position::from_offset(text, value))
}

/// The byte offsets of the first place `key` is written as a key in `text`, and of its value.
fn find_key_and_value(text: &str, key: &str) -> Option<(usize, usize)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let mut from = 0;
        while let Some(found) = line.get(from..).and_then(|l| l.find(key)) {
            let start = from + found;
            let end = start + key.len();
            let before_ok = line[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after = line[end..].trim_start_matches(['"', '\'']).trim_start();
            if before_ok && (after.starts_with(':') || after.starts_with('=')) {
                let quoted = line[..start].ends_with(['"', '\'']);
                let key_at = offset + start - usize::from(quoted);
                let value = after[1..].trim_start_matches([' ', '\t']);
                let value_at = if value.trim().is_empty() || value.starts_with('#') {
                    key_at
                } else {
                    offset + line.len() - value.len()
                };
                return Some((key_at, value_at));
            }
            from = end;
        }
        offset += line.len();
    }
    None
}
