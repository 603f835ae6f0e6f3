//! Round trips through TOML, YAML and JSON, `to_dict`, and syntax errors.

use std::collections::{BTreeMap, BTreeSet};

use impala_config::{
    ConfigError, ConfigFormat, ConvFilter, DurationUnit, ImpalaConfig, LossReduction, OptType,
    PlacementStrategy, Schedule,
};
use serde_json::json;

use crate::TestResult;

const FORMATS: [ConfigFormat; 3] = [ConfigFormat::Toml, ConfigFormat::Yaml, ConfigFormat::Json];

/// A config where every kind of field differs from its default, including options turned off
/// whose default is on (which TOML must write as "none").
fn non_default() -> ImpalaConfig {
    let mut config = ImpalaConfig::default()
        .environment(|e| {
            e.env("Pendulum-v1")
                .env_config(BTreeMap::from([("max_episode_steps".into(), json!(200))]))
                .clip_rewards(1.0)
                .clip_actions(true)
                .normalize_observations(true)
        })
        .training(|t| {
            t.gamma(0.95)
                .lr(1e-3)
                .train_batch_size(1000)
                .train_batch_size_per_learner(Some(250))
                .vtrace_clip_rho_threshold(None)
                .vtrace_clip_pg_rho_threshold(2.0)
                .vtrace_drop_last_ts(true)
                .num_multi_gpu_tower_stacks(2)
                .minibatch_buffer_size(2)
                .num_sgd_iter(3)
                .replay_proportion(0.5)
                .replay_buffer_num_slots(100)
                .grad_clip(None)
                .opt_type(OptType::Rmsprop)
                .lr_schedule(Some(Schedule { points: vec![(0, 5e-4), (20_000_000, 1e-12)] }))
                .entropy_coeff_schedule(Some(Schedule { points: vec![(0, 0.01), (1000, 0.0)] }))
                .separate_vf_optimizer(true)
                .lr_vf(1e-4)
                .loss_reduction(LossReduction::Mean)
                .simple_optimizer(true)
                .model(|m| {
                    m.fcnet_hiddens(vec![64, 32])
                        .fcnet_activation("relu")
                        .conv_filters(Some(vec![
                            ConvFilter::square(16, 8, 4),
                            ConvFilter { out_channels: 32, kernel: [4, 3], stride: [2, 1] },
                        ]))
                        .vf_share_layers(false)
                        .use_lstm(true)
                        .lstm_cell_size(128)
                })
        })
        .env_runners(|r| {
            r.num_env_runners(8)
                .num_envs_per_env_runner(4)
                .rollout_fragment_length(25)
                .num_cpus_per_env_runner(0.5)
                .custom_resources_per_env_runner(BTreeMap::from([("accelerator".into(), 0.25)]))
        })
        .fault_tolerance(|f| f.restart_failed_env_runners(false).max_num_env_runner_restarts(3))
        .learners(|l| l.num_learners(2).num_gpus_per_learner(0.5).num_learner_threads(4))
        .resources(|r| {
            r.num_gpus(2.0).fake_gpus(true).placement_strategy(PlacementStrategy::StrictSpread)
        })
        .reporting(|r| r.min_time_s_per_iteration(0.5).metrics_num_episodes_for_smoothing(20))
        .evaluation(|e| {
            e.evaluation_interval(Some(5))
                .evaluation_duration_unit(DurationUnit::Timesteps)
                .evaluation_num_env_runners(1)
                .evaluation_parallel_to_training(true)
                .evaluation_explore(true)
        })
        .debugging(|d| d.seed(Some(i64::MAX as u64)).log_level("DEBUG").env_runners_only(true));
    config.num_data_loader_buffers = Some(4);
    config
}

#[test]
fn default_round_trips_through_every_format() -> TestResult {
    let config = ImpalaConfig::default();
    for format in FORMATS {
        let text = config.to_string_as(format)?;
        let loaded = ImpalaConfig::from_str_as(&text, format)?;
        assert_eq!(loaded.config, config, "{format}:\n{text}");
        assert!(loaded.warnings.is_empty(), "{format}: {:?}", loaded.warnings);
    }
    Ok(())
}

#[test]
fn non_default_round_trips_through_every_format() -> TestResult {
    let config = non_default();
    // Every top-level value differs from the default except those left at it on purpose.
    let (dict, default) = (config.to_dict(), ImpalaConfig::default().to_dict());
    let same: Vec<_> = dict.keys().filter(|k| dict[*k] == default[*k]).collect();
    assert!(same.len() < dict.len() / 2, "too few changed: {same:?}");
    for format in FORMATS {
        let text = config.to_string_as(format)?;
        let loaded = ImpalaConfig::from_str_as(&text, format)?;
        assert_eq!(loaded.config, config, "{format}:\n{text}");
    }
    Ok(())
}

#[test]
fn conv_filters_take_rllibs_int_or_pair_sizes() -> TestResult {
    let text = "[model]\nconv_filters = [[16, [8, 4], 4], [32, 4, [2, 1]]]\n";
    let config = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?.config;
    let filters = config.model.conv_filters.ok_or("no conv_filters")?;
    assert_eq!(
        filters,
        [
            ConvFilter { out_channels: 16, kernel: [8, 4], stride: [4, 4] },
            ConvFilter { out_channels: 32, kernel: [4, 4], stride: [2, 1] },
        ]
    );
    let bad =
        ImpalaConfig::from_str_as("[model]\nconv_filters = [[16, [8], 4]]\n", ConfigFormat::Toml);
    assert!(bad.is_err_and(|e| e.to_string().contains("conv_filters")));
    Ok(())
}

#[test]
fn seeds_beyond_toml_integers_need_json_or_yaml() -> TestResult {
    let config = ImpalaConfig::default().debugging(|d| d.seed(Some(u64::MAX)));
    for format in [ConfigFormat::Yaml, ConfigFormat::Json] {
        let text = config.to_string_as(format)?;
        assert_eq!(ImpalaConfig::from_str_as(&text, format)?.config, config);
    }
    match config.to_string_as(ConfigFormat::Toml) {
        Err(ConfigError::Serialize { format: ConfigFormat::Toml, message }) => {
            assert!(message.contains("seed"), "{message}");
        }
        other => return Err(format!("expected a TOML error, got {other:?}").into()),
    }
    Ok(())
}

#[test]
fn toml_writes_turned_off_options_as_none() -> TestResult {
    let text =
        ImpalaConfig::default().training(|t| t.grad_clip(None)).to_string_as(ConfigFormat::Toml)?;
    assert!(text.contains("grad_clip = \"none\""), "{text}");
    // Unset options whose default is unset are left out.
    assert!(!text.contains("seed"), "{text}");
    Ok(())
}

#[test]
fn save_and_load_choose_the_format_by_extension() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = non_default();
    for name in ["c.toml", "c.yaml", "c.yml", "c.json", "C.JSON"] {
        let path = dir.path().join(name);
        config.save(&path)?;
        assert_eq!(ImpalaConfig::load(&path)?.config, config, "{name}");
    }
    let text = std::fs::read_to_string(dir.path().join("c.json"))?;
    assert!(text.trim_start().starts_with('{'));
    Ok(())
}

#[test]
fn unknown_extension_and_missing_file_are_errors() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ini = dir.path().join("c.ini");
    assert!(matches!(ImpalaConfig::default().save(&ini), Err(ConfigError::UnknownFormat { .. })));
    assert!(matches!(ImpalaConfig::load(&ini), Err(ConfigError::UnknownFormat { .. })));
    let missing = dir.path().join("missing.toml");
    assert!(matches!(ImpalaConfig::load(&missing), Err(ConfigError::Io { .. })));
    Ok(())
}

#[test]
fn empty_text_is_the_default_config() -> TestResult {
    for format in FORMATS {
        assert_eq!(ImpalaConfig::from_str_as("  \n", format)?.config, ImpalaConfig::default());
    }
    assert_eq!(
        ImpalaConfig::from_str_as("# nothing\n", ConfigFormat::Yaml)?.config,
        ImpalaConfig::default()
    );
    Ok(())
}

#[test]
fn to_dict_is_flat_and_lists_every_registered_key() -> TestResult {
    let dict = ImpalaConfig::default().to_dict();
    let dict_keys: BTreeSet<&str> = dict.keys().map(String::as_str).collect();
    let registered: BTreeSet<&str> = impala_config::keys().iter().map(|k| k.name).collect();
    assert_eq!(dict_keys, registered);
    assert_eq!(registered.len(), impala_config::keys().len(), "a key is registered twice");

    let model = dict["model"].as_object().ok_or("model is not a dict")?;
    let model_keys: BTreeSet<&str> = model.keys().map(String::as_str).collect();
    let registered: BTreeSet<&str> = impala_config::model_keys().iter().map(|k| k.name).collect();
    assert_eq!(model_keys, registered);

    // RLlib's names and defaults.
    assert_eq!(dict["_separate_vf_optimizer"], false);
    assert_eq!(dict["_lr_vf"], 0.0005);
    assert_eq!(dict["vtrace_clip_rho_threshold"], 1.0);
    assert_eq!(dict["opt_type"], "adam");
    assert_eq!(dict["placement_strategy"], "PACK");
    assert_eq!(dict["grad_clip"], 40.0);
    Ok(())
}

#[test]
fn from_dict_inverts_to_dict() -> TestResult {
    let config = non_default();
    let loaded = ImpalaConfig::from_dict(config.to_dict())?;
    assert_eq!(loaded.config, config);
    let err = ImpalaConfig::from_dict(BTreeMap::from([("lr".into(), json!("fast"))]))
        .err()
        .ok_or("expected an error")?;
    assert!(matches!(err, ConfigError::WrongType { ref key, .. } if key == "lr"), "{err}");
    Ok(())
}

#[test]
fn syntax_errors_name_the_format_and_position() -> TestResult {
    let cases = [
        (ConfigFormat::Toml, "lr = 0.1\ngamma = = 0.9\n", 2),
        (ConfigFormat::Yaml, "lr: 0.1\ngamma: [0.9\n", 3),
        (ConfigFormat::Json, "{\"lr\": 0.1,\n \"gamma\": }\n", 2),
    ];
    for (format, text, line) in cases {
        match ImpalaConfig::from_str_as(text, format) {
            Err(ConfigError::Syntax { format: f, position: Some(p), .. }) => {
                assert_eq!((f, p.line), (format, line), "{format}");
            }
            other => return Err(format!("{format}: expected a syntax error, got {other:?}").into()),
        }
    }
    Ok(())
}

#[test]
fn a_config_that_is_not_a_table_is_an_error() {
    let err = ImpalaConfig::from_str_as("[1, 2]", ConfigFormat::Json);
    assert!(matches!(err, Err(ConfigError::WrongType { ref key, .. }) if key == "."), "{err:?}");
}

#[test]
fn yaml_nested_deeper_than_a_config_is_refused_before_parsing() -> TestResult {
    let n = 100_000;
    let flow = format!("lr: {}{}\n", "[".repeat(n), "]".repeat(n));
    let block: String = (0..200).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
    for (text, line) in [(flow, 1), (block, 65)] {
        let err = ImpalaConfig::from_str_as(&text, ConfigFormat::Yaml)
            .err()
            .ok_or("a deeply nested YAML was accepted")?;
        assert!(err.to_string().contains("nests more than 64 levels"), "{err}");
        assert!(err.to_string().contains("refused before parsing"), "{err}");
        assert!(matches!(err, ConfigError::Syntax { position: Some(p), .. } if p.line == line));
    }
    // Nesting as configs have it still reads, quoted brackets and comments included.
    let text = "model:\n  conv_filters: [[16, [8, 8], 4], [32, 4, 2]]  # [[[\n  fcnet_activation: \"[{[\"\n";
    let err = ImpalaConfig::from_str_as(text, ConfigFormat::Yaml).err().map(|e| e.to_string());
    assert!(err.as_deref().is_none_or(|e| !e.contains("nests")), "{err:?}");
    Ok(())
}
