//! RLlib's experiment files (what `rllib train file X.yaml` took): a mapping of an experiment's
//! name to `{env, run: IMPALA, stop: {...}, config: {...}}`. The config is read as a flat
//! config (its `env` from the experiment when the config has none), and the stop criteria are
//! kept under RLlib's names, old stack's or new's, for the caller to stop by.

use serde_json::{Map, Value};

use crate::{ConfigError, Origin};

/// A stop criterion an experiment file may give, whichever name it gives it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopKey {
    /// `episode_return_mean` (`episode_reward_mean`, `env_runners/episode_return_mean`,
    /// `sampler_results/episode_reward_mean`).
    EpisodeReturnMean,
    /// `timesteps_total` (`num_env_steps_sampled_lifetime`, `num_env_steps_sampled`).
    TimestepsTotal,
    /// `training_iteration`.
    TrainingIteration,
    /// `time_total_s`.
    TimeTotalS,
}

impl StopKey {
    /// Every name a stop key is written by, old stack's and new's.
    pub const NAMES: [(&'static str, StopKey); 9] = [
        ("episode_return_mean", StopKey::EpisodeReturnMean),
        ("episode_reward_mean", StopKey::EpisodeReturnMean),
        ("env_runners/episode_return_mean", StopKey::EpisodeReturnMean),
        ("sampler_results/episode_reward_mean", StopKey::EpisodeReturnMean),
        ("timesteps_total", StopKey::TimestepsTotal),
        ("num_env_steps_sampled_lifetime", StopKey::TimestepsTotal),
        ("num_env_steps_sampled", StopKey::TimestepsTotal),
        ("training_iteration", StopKey::TrainingIteration),
        ("time_total_s", StopKey::TimeTotalS),
    ];
}

/// The one experiment of an RLlib experiment file.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// The experiment's name (the file's one top-level key).
    pub name: String,
    /// Its config as a flat config tree, with `env` set.
    pub config: Value,
    /// Its stop criteria, as given.
    pub stop: Vec<(StopKey, f64)>,
}

/// The keys an experiment may have.
const EXPERIMENT_KEYS: [&str; 4] = ["env", "run", "stop", "config"];

/// The experiment `tree` holds when it is an RLlib experiment file (every top-level value a
/// table with a `run` key); `None` for a flat config. Refused, naming what to change: several
/// experiments, another algorithm than IMPALA, keys an experiment does not take here, unknown
/// stop criteria.
pub fn experiment_in(tree: &Value, origin: &Origin) -> Result<Option<Experiment>, ConfigError> {
    let Value::Object(top) = tree else { return Ok(None) };
    let is_experiment = |v: &Value| v.as_object().is_some_and(|m| m.contains_key("run"));
    if top.is_empty() || !top.values().all(is_experiment) {
        return Ok(None);
    }
    let refuse = |reason: String| Err(ConfigError::Experiment { origin: origin.clone(), reason });
    if top.len() > 1 {
        let names: Vec<&str> = top.keys().map(String::as_str).collect();
        return refuse(format!(
            "holds {} experiments ({}); keep one per file",
            top.len(),
            names.join(", ")
        ));
    }
    let Some((name, Value::Object(experiment))) = top.iter().next() else { return Ok(None) };
    if let Some(key) = experiment.keys().find(|k| !EXPERIMENT_KEYS.contains(&k.as_str())) {
        return refuse(format!(
            "experiment `{name}` has `{key}`, which impala-rs does not take; an experiment here \
             has {} (checkpoints and run folders are `impala train`'s options)",
            EXPERIMENT_KEYS.join(", ")
        ));
    }
    let run = experiment.get("run").and_then(Value::as_str).unwrap_or_default();
    if !run.eq_ignore_ascii_case("impala") {
        return refuse(format!(
            "experiment `{name}` runs `{run}`; impala-rs runs IMPALA (`run: IMPALA`)"
        ));
    }
    let mut config = match experiment.get("config") {
        Some(Value::Object(config)) => config.clone(),
        None => Map::new(),
        Some(other) => {
            return refuse(format!("experiment `{name}`'s `config` is {other}, not a table"))
        }
    };
    if let Some(env) = experiment.get("env") {
        config.entry("env").or_insert_with(|| env.clone());
    }
    let mut stop = Vec::new();
    if let Some(given) = experiment.get("stop") {
        let Value::Object(given) = given else {
            return refuse(format!("experiment `{name}`'s `stop` is {given}, not a table"));
        };
        let mut flat = Vec::new();
        flatten("", given, &mut flat);
        for (key, value) in flat {
            let Some(&(_, stop_key)) = StopKey::NAMES.iter().find(|(n, _)| *n == key) else {
                let known: Vec<&str> = StopKey::NAMES.iter().map(|(n, _)| *n).collect();
                return refuse(format!(
                    "experiment `{name}` stops on `{key}`, which impala-rs cannot stop on; use \
                     one of {}",
                    known.join(", ")
                ));
            };
            let Some(number) = value.as_f64() else {
                return refuse(format!(
                    "experiment `{name}`'s stop `{key}` is {value}, not a number"
                ));
            };
            stop.push((stop_key, number));
        }
    }
    Ok(Some(Experiment { name: name.clone(), config: Value::Object(config), stop }))
}

/// `a: {b: 1}` as `("a/b", 1)`, as Tune flattens results.
fn flatten(prefix: &str, map: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
    for (key, value) in map {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}/{key}") };
        match value {
            Value::Object(inner) => flatten(&path, inner, out),
            other => out.push((path, other.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_rllib_experiment_reads_as_its_config_and_stop_criteria() -> Result<(), ConfigError> {
        let tree = json!({"cartpole-impala": {
            "env": "CartPole-v1",
            "run": "IMPALA",
            "stop": {"env_runners": {"episode_return_mean": 150}, "timesteps_total": 500000},
            "config": {"num_env_runners": 2, "lr": 0.0005}
        }});
        let experiment = experiment_in(&tree, &Origin::Text)?.ok_or(ConfigError::Serialize {
            format: crate::ConfigFormat::Json,
            message: "no experiment".into(),
        })?;
        assert_eq!(experiment.name, "cartpole-impala");
        assert_eq!(experiment.config["env"], "CartPole-v1");
        assert_eq!(experiment.config["lr"], 0.0005);
        assert_eq!(
            experiment.stop,
            vec![(StopKey::EpisodeReturnMean, 150.0), (StopKey::TimestepsTotal, 500000.0)]
        );
        // A flat config is none.
        assert_eq!(experiment_in(&json!({"env": "CartPole-v1"}), &Origin::Text)?, None);
        Ok(())
    }

    #[test]
    fn a_yaml_experiment_file_loads_as_a_config_with_its_stop() -> Result<(), ConfigError> {
        let text = "cartpole-impala:\n  env: CartPole-v1\n  run: IMPALA\n  stop:\n    \
                    timesteps_total: 5000\n  config:\n    lr: 0.0005\n    model:\n      \
                    fcnet_hiddens: [32]\n";
        let loaded = crate::ImpalaConfig::from_str_as(text, crate::ConfigFormat::Yaml)?;
        assert_eq!((loaded.config.env.as_str(), loaded.config.lr), ("CartPole-v1", 0.0005));
        assert_eq!(loaded.config.model.fcnet_hiddens, vec![32]);
        assert_eq!(loaded.stop, vec![(StopKey::TimestepsTotal, 5000.0)]);
        // Its config's keys are checked as a flat config's are.
        let typo = text.replace("lr:", "lrr:");
        let err = crate::ImpalaConfig::from_str_as(&typo, crate::ConfigFormat::Yaml).err();
        assert!(err.is_some_and(|e| e.to_string().contains("unknown key `lrr`")));
        Ok(())
    }

    #[test]
    fn other_algorithms_unknown_stops_and_several_experiments_are_refused() {
        let refused = |tree: Value| {
            experiment_in(&tree, &Origin::Text).err().map(|e| e.to_string()).unwrap_or_default()
        };
        let ppo = refused(json!({"x": {"run": "PPO", "env": "CartPole-v1"}}));
        assert!(ppo.contains("runs `PPO`; impala-rs runs IMPALA"), "{ppo}");
        let stop = refused(json!({"x": {"run": "IMPALA", "stop": {"info/num_steps": 5}}}));
        assert!(
            stop.contains("stops on `info/num_steps`, which impala-rs cannot stop on"),
            "{stop}"
        );
        let two = refused(json!({"a": {"run": "IMPALA"}, "b": {"run": "IMPALA"}}));
        assert!(two.contains("holds 2 experiments (a, b)"), "{two}");
        let local = refused(json!({"a": {"run": "IMPALA", "local_dir": "/tmp"}}));
        assert!(local.contains("has `local_dir`"), "{local}");
    }
}
