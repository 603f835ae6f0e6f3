//! Search spaces in a config file, as Ray Tune writes them in dict form: `{grid_search = [a, b]}`
//! (every value; the cartesian product over all grid keys) or `{choice = [a, b, c]}` (one value
//! drawn per trial), in place of any value (top level, inside `model`, inside `env_config`,
//! inside a list). The raw file is expanded into one plain config tree per trial in Ray Tune's
//! order (`BasicVariantGenerator`): grid keys sorted by their path, the first one varying
//! fastest, the whole grid repeated `num_samples` times with the choices drawn anew for every
//! trial from one seeded stream.

use std::fmt;
use std::fs;
use std::path::Path;

use impala::config::{experiment_in, ConfigFormat, ImpalaConfig, Origin, StopKey};
use serde_json::Value;

use crate::{Result, TuneError};

/// The two search spaces, as Ray Tune writes them in dict form (`{"grid_search": [...]}`;
/// `choice` is `tune.choice` spelled the same way).
const GRID_SEARCH: &str = "grid_search";
const CHOICE: &str = "choice";

/// Ray Tune's other sampling functions: a one-key table with one of these names is almost
/// certainly meant as a search space, so it is refused instead of being passed on as a value.
const UNSUPPORTED_DOMAINS: [&str; 11] = [
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "randn",
    "qrandn",
    "randint",
    "qrandint",
    "lograndint",
    "qlograndint",
    "sample_from",
];

/// More trials than this is almost certainly a typo in a grid (and would create as many
/// folders); split such a sweep into several experiments.
pub const MAX_TRIALS: u64 = 10_000;

/// The longest parameter part of a trial folder's name (file systems allow 255 bytes).
const MAX_TAG_CHARS: usize = 80;

/// One step of the path to a value in the config tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Where a value is: `model.fcnet_hiddens`, `lr_schedule[1][1]`. Ordered as Tune orders its
/// grid variables (tuples of keys, compared element by element).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ValuePath(Vec<Segment>);

impl ValuePath {
    fn child(&self, segment: Segment) -> ValuePath {
        let mut segments = self.0.clone();
        segments.push(segment);
        ValuePath(segments)
    }

    /// The last key (for short trial names).
    fn last_key(&self) -> String {
        let keys: Vec<String> = self
            .0
            .iter()
            .rev()
            .take_while(|s| matches!(s, Segment::Index(_)))
            .map(|s| match s {
                Segment::Index(i) => format!("{i}"),
                Segment::Key(k) => k.clone(),
            })
            .collect();
        let key = self.0.iter().rev().find_map(|s| match s {
            Segment::Key(k) => Some(k.clone()),
            Segment::Index(_) => None,
        });
        let mut out = key.unwrap_or_default();
        for index in keys.iter().rev() {
            out.push('_');
            out.push_str(index);
        }
        out
    }
}

impl fmt::Display for ValuePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(the top level of the file)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(k) if i == 0 => f.write_str(k)?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// How a search variable is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Every value, in the cartesian product.
    Grid,
    /// One value drawn per trial.
    Choice,
}

/// A search space found in the file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Variable {
    pub(crate) path: ValuePath,
    kind: Kind,
    values: Vec<Value>,
}

/// One trial before validation: its config tree and the values it got.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrialSpec {
    pub(crate) tree: Value,
    /// The searched values, by path (grid and choice together, in path order).
    pub(crate) params: Vec<(ValuePath, Value)>,
}

/// Reads a config file as a plain tree (JSON values), the way `ImpalaConfig::load` parses it,
/// but without its key and type checks (search spaces are not config values). A file that
/// does not parse, or has no keys, gets `ImpalaConfig::load`'s error, which says where.
pub(crate) fn read_tree(path: &Path) -> Result<(Value, Vec<(StopKey, f64)>)> {
    let format = ConfigFormat::from_path(path)?;
    let text = fs::read(path).ok().and_then(|bytes| String::from_utf8(bytes).ok());
    let parsed: Option<Value> = text.and_then(|text| match format {
        ConfigFormat::Toml => toml::from_str(&text).ok(),
        ConfigFormat::Yaml => serde_norway::from_str(&text).ok(),
        ConfigFormat::Json => serde_json::from_str(&text).ok(),
    });
    match parsed {
        Some(Value::Object(map)) if !map.is_empty() => {
            // An RLlib experiment file: its config (with its search spaces) and stop criteria.
            let tree = Value::Object(map);
            let origin = Origin::File(path.to_path_buf());
            Ok(match experiment_in(&tree, &origin)? {
                Some(experiment) => (experiment.config, experiment.stop),
                None => (tree, Vec::new()),
            })
        }
        // Missing, not text, not the format, empty, or not a table: the loader's error says
        // which and where, worded as `impala train` words it.
        _ => match ImpalaConfig::load(path) {
            Err(e) => Err(e.into()),
            Ok(_) => Err(TuneError::NotATable { file: path.to_path_buf() }),
        },
    }
}

/// Whether `value` holds a search space anywhere.
fn contains_search_space(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.contains_key(GRID_SEARCH)
                || map.contains_key(CHOICE)
                || map.values().any(contains_search_space)
        }
        Value::Array(items) => items.iter().any(contains_search_space),
        _ => false,
    }
}

/// Every search space in `tree`, sorted by path (Tune's order).
pub(crate) fn find_variables(tree: &Value, file: &Path) -> Result<Vec<Variable>> {
    let mut out = Vec::new();
    collect(tree, &ValuePath::default(), file, &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn collect(value: &Value, path: &ValuePath, file: &Path, out: &mut Vec<Variable>) -> Result<()> {
    let bad = |problem: String| TuneError::BadSearchSpace {
        file: file.to_path_buf(),
        path: path.to_string(),
        problem,
    };
    match value {
        Value::Object(map) => {
            let spaces: Vec<&str> =
                [GRID_SEARCH, CHOICE].into_iter().filter(|k| map.contains_key(*k)).collect();
            if let Some(&kind_key) = spaces.first() {
                if map.len() > 1 {
                    let others: Vec<String> = map.keys().map(|k| format!("`{k}`")).collect();
                    return Err(bad(format!(
                        "mixes a search space with other keys ({}): a search space is a table \
                         with exactly one key, `grid_search` or `choice`, e.g. \
                         {{grid_search = [0.001, 0.0005]}}",
                        others.join(", ")
                    )));
                }
                let Some(Value::Array(values)) = map.get(kind_key) else {
                    return Err(bad(format!(
                        "has a `{kind_key}` that is not a list; write the values in a list, \
                         e.g. {{{kind_key} = [0.001, 0.0005]}}"
                    )));
                };
                if values.is_empty() {
                    return Err(bad(format!(
                        "has an empty `{kind_key}` list: it gives no trial; list at least one \
                         value, e.g. {{{kind_key} = [0.001, 0.0005]}}"
                    )));
                }
                if values.iter().any(contains_search_space) {
                    return Err(bad(format!(
                        "has a search space inside its `{kind_key}` values, which impala tune \
                         does not expand; write the combinations out, or search the inner key \
                         on its own"
                    )));
                }
                if path.0.is_empty() {
                    return Err(bad(
                        "is a search space: the file must be a table of config keys, with \
                         search spaces as their values"
                            .into(),
                    ));
                }
                let kind = if kind_key == GRID_SEARCH { Kind::Grid } else { Kind::Choice };
                out.push(Variable { path: path.clone(), kind, values: values.clone() });
                return Ok(());
            }
            if let (1, Some(only)) = (map.len(), map.keys().next()) {
                if UNSUPPORTED_DOMAINS.contains(&only.as_str()) {
                    return Err(bad(format!(
                        "is Ray Tune's `{only}`, which impala tune does not sample; list the \
                         values to try as {{grid_search = [...]}} or {{choice = [...]}}"
                    )));
                }
            }
            for (key, child) in map {
                collect(child, &path.child(Segment::Key(key.clone())), file, out)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect(child, &path.child(Segment::Index(i)), file, out)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Replaces the value at `path` (which [`collect`] found in the same tree).
pub(crate) fn assign(tree: &mut Value, path: &ValuePath, value: Value) -> bool {
    let mut at = tree;
    for segment in &path.0 {
        let next = match (segment, at) {
            (Segment::Key(k), Value::Object(map)) => map.get_mut(k),
            (Segment::Index(i), Value::Array(items)) => items.get_mut(*i),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    *at = value;
    true
}

/// SplitMix64 (Steele, Lea and Flood 2014): tiny, seedable and the same on every platform and
/// dependency version, so a `--search-seed` gives the same trials for as long as this code
/// does. (Tune's numpy draws cannot be reproduced outside Python anyway.)
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (Lemire's multiply-shift; the bias is below 2^-50 for the
    /// list lengths a config holds).
    fn below(&mut self, n: usize) -> usize {
        let wide = u128::from(self.next_u64()) * n as u128;
        usize::try_from(wide >> 64).unwrap_or(0)
    }
}

/// The trials of `tree`: for each of `num_samples` samples, every grid point (the first grid
/// variable by path varying fastest, as Tune's `_grid_search_generator`), with every choice
/// drawn from one seeded stream in trial order and path order.
pub(crate) fn expand(
    tree: &Value,
    variables: &[Variable],
    num_samples: u64,
    seed: u64,
    file: &Path,
) -> Result<Vec<TrialSpec>> {
    let grid: Vec<&Variable> = variables.iter().filter(|v| v.kind == Kind::Grid).collect();
    let choices: Vec<&Variable> = variables.iter().filter(|v| v.kind == Kind::Choice).collect();
    let points = grid.iter().try_fold(1u64, |n, v| n.checked_mul(v.values.len() as u64));
    let count = points.and_then(|p| p.checked_mul(num_samples)).unwrap_or(u64::MAX);
    if count > MAX_TRIALS {
        return Err(TuneError::TooManyTrials { file: file.to_path_buf(), count });
    }
    let points = points.unwrap_or(1);
    let mut rng = SplitMix64(seed);
    let mut trials = Vec::new();
    for _sample in 0..num_samples {
        for point in 0..points {
            let mut trial = tree.clone();
            let mut params = Vec::new();
            let mut rest = point;
            for var in &grid {
                let len = var.values.len() as u64;
                let value = var.values[usize::try_from(rest % len).unwrap_or(0)].clone();
                rest /= len;
                params.push((var.path.clone(), value));
            }
            for var in &choices {
                let value = var.values[rng.below(var.values.len())].clone();
                params.push((var.path.clone(), value));
            }
            params.sort_by(|a, b| a.0.cmp(&b.0));
            for (path, value) in &params {
                if !assign(&mut trial, path, value.clone()) {
                    return Err(TuneError::BadSearchSpace {
                        file: file.to_path_buf(),
                        path: path.to_string(),
                        problem: "could not be replaced by its value (a bug in impala tune; \
                                  please report it with the file)"
                            .into(),
                    });
                }
            }
            trials.push(TrialSpec { tree: trial, params });
        }
    }
    Ok(trials)
}

/// A value as a short text: numbers and strings as written, lists joined by `_`.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join("_"),
        other => other.to_string(),
    }
}

/// `trial_<NNN>_<key=value,...>`, as Tune names trials by their parameters (last key of each
/// path, the whole path where two would read the same), reduced to characters every file
/// system and shell takes. The number keeps the names unique and in trial order.
pub(crate) fn trial_name(index: usize, total: usize, params: &[(ValuePath, Value)]) -> String {
    let width = total.saturating_sub(1).to_string().len().max(3);
    let short: Vec<String> = params.iter().map(|(p, _)| p.last_key()).collect();
    let parts: Vec<String> = params
        .iter()
        .zip(&short)
        .map(|((path, value), key)| {
            let key = if short.iter().filter(|k| *k == key).count() > 1 {
                path.to_string()
            } else {
                key.clone()
            };
            format!("{key}={}", value_text(value))
        })
        .collect();
    let mut tag: String = parts
        .join(",")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._=,+-".contains(c) { c } else { '_' })
        .collect();
    if tag.len() > MAX_TAG_CHARS {
        tag.truncate(MAX_TAG_CHARS);
    }
    if tag.is_empty() {
        format!("trial_{index:0width$}")
    } else {
        format!("trial_{index:0width$}_{tag}")
    }
}

/// The key an override (`KEY=VALUE`) sets, as a search path would read.
pub(crate) fn override_key(text: &str) -> String {
    let lhs = text.split_once('=').map_or(text, |(l, _)| l).trim();
    match lhs.split_once('.') {
        Some((head, rest)) if impala::config::Group::from_name(head).is_some() => rest.into(),
        _ => lhs.into(),
    }
}

/// The searched values that can change what `check_environment` sees: the env, its config,
/// its backend and devices. Trials that differ only in other values share one check, so a
/// grid over `lr` with a Python env starts one env worker for the check, not one per trial.
pub(crate) fn affects_environment(path: &ValuePath) -> bool {
    match path.0.first() {
        Some(Segment::Key(k)) => k.starts_with("env") || k.contains("gpu") || k.contains("learner"),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn variables(tree: &Value) -> Result<Vec<Variable>> {
        find_variables(tree, Path::new("c.toml"))
    }

    fn names(specs: &[TrialSpec]) -> Vec<String> {
        specs.iter().enumerate().map(|(i, s)| trial_name(i, specs.len(), &s.params)).collect()
    }

    #[test]
    fn the_first_grid_key_by_path_varies_fastest_as_in_tune() -> Result<()> {
        // Tune sorts grid variables by path and increments the first one first
        // (ray/tune/search/variant_generator.py, _grid_search_generator).
        let tree = json!({
            "lr": {"grid_search": [0.1, 0.2]},
            "entropy_coeff": {"grid_search": [0, 1, 2]},
            "model": {"fcnet_hiddens": [32]},
        });
        let vars = variables(&tree)?;
        let specs = expand(&tree, &vars, 1, 0, Path::new("c.toml"))?;
        let got: Vec<(Value, Value)> =
            specs.iter().map(|s| (s.tree["entropy_coeff"].clone(), s.tree["lr"].clone())).collect();
        let want: Vec<(Value, Value)> =
            [(0, 0.1), (1, 0.1), (2, 0.1), (0, 0.2), (1, 0.2), (2, 0.2)]
                .iter()
                .map(|(e, l)| (json!(e), json!(l)))
                .collect();
        assert_eq!(got, want);
        assert_eq!(names(&specs)[4], "trial_004_entropy_coeff=1,lr=0.2");
        Ok(())
    }

    #[test]
    fn num_samples_repeats_the_grid_and_redraws_choices_reproducibly() -> Result<()> {
        let tree = json!({
            "lr": {"grid_search": [0.1, 0.2]},
            "model": {"fcnet_hiddens": {"choice": [[16], [32], [64], [128]]}},
        });
        let vars = variables(&tree)?;
        let a = expand(&tree, &vars, 3, 7, Path::new("c.toml"))?;
        let b = expand(&tree, &vars, 3, 7, Path::new("c.toml"))?;
        let c = expand(&tree, &vars, 3, 8, Path::new("c.toml"))?;
        assert_eq!(a.len(), 6);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let lrs: Vec<&Value> = a.iter().map(|s| &s.tree["lr"]).collect();
        assert_eq!(
            lrs,
            [&json!(0.1), &json!(0.2), &json!(0.1), &json!(0.2), &json!(0.1), &json!(0.2)]
        );
        assert!(a.iter().all(|s| s.params.len() == 2));
        Ok(())
    }

    #[test]
    fn search_spaces_inside_lists_and_env_config_are_found() -> Result<()> {
        let tree = json!({
            "lr_schedule": [[0, {"grid_search": [1, 2]}]],
            "env_config": {"size": {"choice": [3]}},
        });
        let vars = variables(&tree)?;
        let paths: Vec<String> = vars.iter().map(|v| v.path.to_string()).collect();
        assert_eq!(paths, ["env_config.size", "lr_schedule[0][1]"]);
        let specs = expand(&tree, &vars, 1, 0, Path::new("c.toml"))?;
        assert_eq!(specs[1].tree["lr_schedule"], json!([[0, 2]]));
        assert_eq!(names(&specs)[1], "trial_001_size=3,lr_schedule_0_1=2");
        Ok(())
    }

    #[test]
    fn bad_search_spaces_name_their_key() -> Result<(), String> {
        let cases = [
            (json!({"lr": {"grid_search": []}}), "`lr` has an empty `grid_search`"),
            (json!({"lr": {"grid_search": [1], "x": 2}}), "`lr` mixes a search space"),
            (json!({"lr": {"choice": 3}}), "`lr` has a `choice` that is not a list"),
            (json!({"model": {"a": {"uniform": [0, 1]}}}), "`model.a` is Ray Tune's `uniform`"),
            (json!({"lr": {"grid_search": [{"choice": [1]}]}}), "search space inside"),
        ];
        for (tree, want) in cases {
            match variables(&tree) {
                Err(e) => assert!(e.to_string().contains(want), "`{e}` lacks `{want}`"),
                Ok(v) => return Err(format!("{tree} gave {v:?} instead of an error")),
            }
        }
        Ok(())
    }

    #[test]
    fn trial_names_are_safe_folder_names() {
        let params = vec![
            (ValuePath(vec![Segment::Key("env".into())]), json!("ALE/Pong v5")),
            (
                ValuePath(vec![Segment::Key("model".into()), Segment::Key("fcnet_hiddens".into())]),
                json!([64, 64]),
            ),
        ];
        assert_eq!(trial_name(7, 1200, &params), "trial_0007_env=ALE_Pong_v5,fcnet_hiddens=64_64");
        assert_eq!(trial_name(0, 1, &[]), "trial_000");
    }

    #[test]
    fn the_seeded_stream_is_fixed() {
        // SplitMix64's published first output for seed 0 (Vigna's splitmix64.c).
        assert_eq!(SplitMix64(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut rng = SplitMix64(1);
        assert!((0..1000).all(|_| rng.below(3) < 3));
    }
}
