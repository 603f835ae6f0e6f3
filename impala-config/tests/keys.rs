//! Aliases, unknown keys, wrong types with positions, `set` and overrides, builder groups.

use impala_config::{
    ConfigError, ConfigFormat, Group, ImpalaConfig, OptType, WarningKind, ALIASES,
};
use serde_json::{json, Value};

use crate::TestResult;

/// A value of the same type as `value` but different from it.
fn changed(value: &Value) -> Value {
    match value {
        Value::Bool(b) => json!(!b),
        Value::Number(n) if n.is_u64() => json!(n.as_u64().unwrap_or(0) + 3),
        Value::Number(n) => json!(n.as_f64().unwrap_or(0.0) + 1.5),
        Value::Object(_) => json!({ "x": 1.0 }),
        other => other.clone(),
    }
}

#[test]
fn every_alias_sets_its_key_in_files_set_and_overrides() -> TestResult {
    let default = ImpalaConfig::default().to_dict();
    for alias in ALIASES {
        let value = changed(&default[alias.canonical]);
        assert_ne!(value, default[alias.canonical], "{}", alias.name);
        let expected_warnings = usize::from(alias.deprecated);

        // A file (JSON text is valid YAML; both go through serde's alias attributes).
        for format in [ConfigFormat::Json, ConfigFormat::Yaml] {
            let text = json!({ alias.name: value }).to_string();
            let loaded = ImpalaConfig::from_str_as(&text, format)?;
            assert_eq!(
                loaded.config.to_dict()[alias.canonical],
                value,
                "{} in {format}",
                alias.name
            );
            assert_eq!(loaded.warnings.len(), expected_warnings, "{}", alias.name);
        }

        let mut config = ImpalaConfig::default();
        let warnings = config.set(alias.name, value.clone())?;
        assert_eq!(config.to_dict()[alias.canonical], value, "set({})", alias.name);
        assert_eq!(warnings.len(), expected_warnings);

        let mut config = ImpalaConfig::default();
        let warnings = config.apply_override(&format!("{}={value}", alias.name))?;
        assert_eq!(config.to_dict()[alias.canonical], value, "override {}", alias.name);
        if let Some(w) = warnings.first() {
            let expected =
                WarningKind::DeprecatedKey { old: alias.name.into(), new: alias.canonical.into() };
            assert_eq!(w.kind, expected);
            assert!(w.to_string().contains(alias.canonical));
        }
    }
    Ok(())
}

#[test]
fn rllib_old_api_yaml_loads_with_deprecation_warnings() -> TestResult {
    // In the style of RLlib's tuned example cartpole-impala.yaml.
    let text = "env: CartPole-v1\nnum_workers: 4\nnum_envs_per_worker: 2\nnum_gpus: 0\n\
                vtrace_drop_last_ts: false\nrecreate_failed_workers: true\nnum_cpus_for_driver: 2\n";
    let loaded = ImpalaConfig::from_str_as(text, ConfigFormat::Yaml)?;
    let c = &loaded.config;
    assert_eq!(
        (c.num_env_runners, c.num_envs_per_env_runner, c.num_cpus_for_main_process),
        (4, 2, 2.0)
    );
    let olds: Vec<_> = loaded
        .warnings
        .iter()
        .filter_map(|w| match &w.kind {
            WarningKind::DeprecatedKey { old, .. } => Some(old.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        olds,
        ["num_cpus_for_driver", "num_envs_per_worker", "num_workers", "recreate_failed_workers"]
    );
    Ok(())
}

#[test]
fn new_api_names_are_accepted_without_warnings() -> TestResult {
    let text = "num_epochs = 2\nnum_aggregator_actors_per_learner = 1\n";
    let loaded = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?;
    assert_eq!((loaded.config.num_sgd_iter, loaded.config.num_aggregation_workers), (2, 1));
    assert!(loaded.warnings.is_empty());
    Ok(())
}

#[test]
fn an_option_given_twice_is_an_error() {
    let err = ImpalaConfig::from_str_as("num_workers: 2\nnum_env_runners: 3\n", ConfigFormat::Yaml);
    assert!(
        matches!(err, Err(ConfigError::DuplicateKey { ref key, .. }) if key == "num_env_runners"),
        "{err:?}"
    );
}

#[test]
fn unknown_keys_name_the_nearest_key_and_where_they_are() -> TestResult {
    let cases = [
        (ConfigFormat::Toml, "lr = 0.1\n\nnum_worker = 3\n", "num_worker", "num_env_runners", 3, 1),
        (ConfigFormat::Yaml, "lr: 0.1\nentropy_coef: 0.1\n", "entropy_coef", "entropy_coeff", 2, 1),
        (ConfigFormat::Json, "{\n  \"lrr\": 0.1\n}", "lrr", "lr", 2, 3),
        (
            ConfigFormat::Toml,
            "[model]\nfcnet_hidens = [64]\n",
            "model.fcnet_hidens",
            "model.fcnet_hiddens",
            2,
            1,
        ),
        (
            ConfigFormat::Yaml,
            "gamma: 0.9\nvtrace_clip_rho: 2\n",
            "vtrace_clip_rho",
            "vtrace_clip_rho_threshold",
            2,
            1,
        ),
    ];
    for (format, text, key, nearest, line, column) in cases {
        match ImpalaConfig::from_str_as(text, format) {
            Err(err @ ConfigError::UnknownKey { .. }) => {
                let ConfigError::UnknownKey { key: k, suggestion, position, .. } = &err else {
                    unreachable!()
                };
                assert_eq!((k.as_str(), suggestion.as_str()), (key, nearest));
                let p = position.ok_or("no position")?;
                assert_eq!((p.line, p.column), (line, column), "{format} {key}");
                assert!(err.to_string().contains(&format!("`{nearest}`")), "{err}");
            }
            other => return Err(format!("{key}: expected UnknownKey, got {other:?}").into()),
        }
    }
    let mut config = ImpalaConfig::default();
    let err = config.apply_override("model.use_lstmm=true").err().ok_or("expected an error")?;
    assert!(
        matches!(err, ConfigError::UnknownKey { ref suggestion, .. } if suggestion == "model.use_lstm")
    );
    // A model option written without its group is pointed at its group, not at a far top-level
    // key; a top-level key that is close still wins.
    for (text, nearest) in [
        ("fcnet_activation=relu", "model.fcnet_activation"),
        ("use_lstm=true", "model.use_lstm"),
        ("fcnet_hidens=[64]", "model.fcnet_hiddens"),
        ("lrr=0.1", "lr"),
    ] {
        let err = config.apply_override(text).err().ok_or("expected an error")?;
        assert!(
            matches!(err, ConfigError::UnknownKey { ref suggestion, .. } if suggestion == nearest),
            "{text}: {err}"
        );
    }
    Ok(())
}

#[test]
fn wrong_types_name_the_key_the_expected_type_and_the_position() -> TestResult {
    let cases = [
        (
            ConfigFormat::Toml,
            "lr = 0.1\ngamma = 0.9\nlearner_queue_size = \"big\"\n",
            "learner_queue_size",
            "a non-negative integer",
            3,
        ),
        (
            ConfigFormat::Yaml,
            "lr: 0.1\nlearner_queue_size: big\n",
            "learner_queue_size",
            "a non-negative integer",
            2,
        ),
        (
            ConfigFormat::Json,
            "{\"lr\": 0.1,\n\"learner_queue_size\": \"big\"}",
            "learner_queue_size",
            "a non-negative integer",
            2,
        ),
        (
            ConfigFormat::Toml,
            "[model]\nfcnet_hiddens = [64, \"x\"]\n",
            "model.fcnet_hiddens[1]",
            "a list of non-negative integers",
            2,
        ),
        (
            ConfigFormat::Yaml,
            "model:\n  fcnet_hiddens: [64, x]\n",
            "model.fcnet_hiddens[1]",
            "a list of non-negative integers",
            2,
        ),
        (
            ConfigFormat::Json,
            "{\"model\": {\n\"vf_share_layers\": 3}}",
            "model.vf_share_layers",
            "true or false",
            2,
        ),
        (ConfigFormat::Yaml, "\nopt_type: sgd\n", "opt_type", "\"adam\" or \"rmsprop\"", 2),
        (ConfigFormat::Toml, "\n\ngrad_clip = \"big\"\n", "grad_clip", "a number, or none", 3),
        (ConfigFormat::Yaml, "num_workers: -1\n", "num_workers", "a non-negative integer", 1),
        (
            ConfigFormat::Toml,
            "precision = \"fp16\"\n",
            "precision",
            "\"fp32\" or \"bf16-mixed\"",
            1,
        ),
    ];
    for (format, text, key, expected, line) in cases {
        match ImpalaConfig::from_str_as(text, format) {
            Err(err @ ConfigError::WrongType { .. }) => {
                let ConfigError::WrongType { key: k, expected: e, position, .. } = &err else {
                    unreachable!()
                };
                assert_eq!((k.as_str(), e.as_str()), (key, expected), "{format}: {err}");
                let p = position.ok_or_else(|| format!("{format} {key}: no position: {err}"))?;
                assert_eq!(p.line, line, "{format} {key}: {err}");
                assert!(err.to_string().contains(&format!("<config text>:{line}:")), "{err}");
            }
            other => {
                return Err(format!("{format} {key}: expected WrongType, got {other:?}").into())
            }
        }
    }
    Ok(())
}

#[test]
fn file_errors_name_the_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "lr = \"fast\"\n")?;
    let err = ImpalaConfig::load(&path).err().ok_or("expected an error")?;
    assert!(err.to_string().starts_with(&format!("{}:1:", path.display())), "{err}");
    Ok(())
}

#[test]
fn none_spellings_turn_options_off() -> TestResult {
    let cases = [
        (ConfigFormat::Toml, "grad_clip = \"none\"\nseed = \"None\"\n"),
        (ConfigFormat::Yaml, "grad_clip: null\nseed: ~\n"),
        (ConfigFormat::Yaml, "grad_clip: None\nseed: none\n"),
        (ConfigFormat::Json, "{\"grad_clip\": null, \"seed\": null}"),
    ];
    for (format, text) in cases {
        let config = ImpalaConfig::from_str_as(text, format)?.config;
        assert_eq!((config.grad_clip, config.seed), (None, None), "{text}");
    }
    let mut config = ImpalaConfig::default();
    config.set("vtrace_clip_rho_threshold", json!("none"))?;
    config.apply_override("debugging.seed=7")?;
    assert_eq!((config.vtrace_clip_rho_threshold, config.seed), (None, Some(7)));
    // A string field keeps the word.
    config.apply_override("env=none")?;
    assert_eq!(config.env, "none");
    Ok(())
}

#[test]
fn overrides_parse_values_and_check_groups() -> TestResult {
    let mut config = ImpalaConfig::default();
    for text in [
        "training.lr=0.001",
        "lr_schedule=[[0, 0.001], [1000, 0.0001]]",
        "model.fcnet_hiddens=[64, 64]",
        "training.model.fcnet_activation=relu",
        "env=MountainCar-v0",
        "environment.env_config.max_episode_steps=200",
        "env_runners.custom_resources_per_env_runner.tpu=0.5",
        "rollouts.num_rollout_workers=3",
        "opt_type=rmsprop",
        "resources._fake_gpus=true",
        " num_gpus = 2 ",
        "evaluation.evaluation_interval=10",
        "env_config={ frameskip = 4 }",
        "policies=[\"left\", \"right\"]",
        "multi_agent.policy_mapping.player_1=left",
        "policy_mapping.player_*=\"right\"",
        "policy_config.right={ lr = 0.01 }",
        "policy_config.left.entropy_coeff=0.02",
        "policy_config.left.model.fcnet_hiddens=[32]",
    ] {
        config.apply_override(text).map_err(|e| format!("{text}: {e}"))?;
    }
    assert_eq!(config.lr, 0.001);
    assert_eq!(config.lr_schedule.as_ref().map(|s| s.points.len()), Some(2));
    assert_eq!(config.model.fcnet_hiddens, [64, 64]);
    assert_eq!(config.model.fcnet_activation, "relu");
    assert_eq!(config.env, "MountainCar-v0");
    assert_eq!(config.custom_resources_per_env_runner["tpu"], 0.5);
    assert_eq!(config.num_env_runners, 3);
    assert_eq!(config.opt_type, OptType::Rmsprop);
    assert!(config.fake_gpus);
    assert_eq!(config.num_gpus, 2.0);
    assert_eq!(config.evaluation_interval, Some(10));
    assert_eq!(config.policy_mapping["player_1"], "left");
    assert_eq!(config.policy_mapping["player_*"], "right");
    assert_eq!(config.for_policy("right")?.lr, 0.01);
    assert_eq!(config.for_policy("left")?.entropy_coeff, 0.02);
    assert_eq!(config.for_policy("left")?.model.fcnet_hiddens, [32]);
    assert!(config.apply_override("policy_mapping.player_2=[1]").is_err());
    // The whole table replaced the single entry set before.
    assert_eq!(config.env_config.get("frameskip"), Some(&json!(4)));
    assert_eq!(config.env_config.get("max_episode_steps"), None);

    let wrong_group = config.apply_override("resources.lr=0.1").err().ok_or("expected an error")?;
    match wrong_group {
        ConfigError::WrongGroup { ref expected_group, .. } => {
            assert_eq!(expected_group, "training")
        }
        other => return Err(format!("expected WrongGroup, got {other}").into()),
    }
    for bad in ["lr", "=3", "lr=inf", "lr=nan"] {
        let err = config.apply_override(bad);
        assert!(matches!(err, Err(ConfigError::BadOverride { .. })), "{bad}: {err:?}");
    }
    match config.apply_override("train_batch_size=500.5") {
        Err(ConfigError::WrongType { key, expected, origin, .. }) => {
            assert_eq!(
                (key.as_str(), expected.as_str()),
                ("train_batch_size", "a non-negative integer")
            );
            assert_eq!(origin, impala_config::Origin::Override("train_batch_size=500.5".into()));
        }
        other => return Err(format!("expected WrongType, got {other:?}").into()),
    }
    Ok(())
}

#[test]
fn set_takes_whole_tables_and_reports_type_errors() -> TestResult {
    let mut config = ImpalaConfig::default();
    config.set("model", json!({ "fcnet_hiddens": [8], "use_lstm": true }))?;
    assert_eq!(
        (config.model.fcnet_hiddens.as_slice(), config.model.use_lstm),
        ([8].as_slice(), true)
    );
    // Model keys left out take their defaults, as in a file.
    assert_eq!(config.model.fcnet_activation, "tanh");
    match config.set("model", json!({ "lstm_cell_size": "big" })) {
        Err(ConfigError::WrongType { key, .. }) => assert_eq!(key, "model.lstm_cell_size"),
        other => return Err(format!("expected WrongType, got {other:?}").into()),
    }
    match config.set("entropy_coeff", json!([1])) {
        Err(ConfigError::WrongType { key, expected, .. }) => {
            assert_eq!((key.as_str(), expected.as_str()), ("entropy_coeff", "a number"));
        }
        other => return Err(format!("expected WrongType, got {other:?}").into()),
    }
    assert!(matches!(config.set("nope.x", json!(1)), Err(ConfigError::UnknownKey { .. })));
    Ok(())
}

#[test]
fn every_key_belongs_to_a_group_as_in_rllib() -> TestResult {
    let group = |name: &str| impala_config::key_info(name).map(|k| k.group);
    assert_eq!(group("lr"), Some(Group::Training));
    assert_eq!(group("model"), Some(Group::Training));
    assert_eq!(group("train_batch_size_per_learner"), Some(Group::Training));
    assert_eq!(group("num_env_runners"), Some(Group::EnvRunners));
    assert_eq!(group("restart_failed_env_runners"), Some(Group::FaultTolerance));
    assert_eq!(group("num_learners"), Some(Group::Learners));
    assert_eq!(group("_fake_gpus"), Some(Group::Resources));
    assert_eq!(group("precision"), Some(Group::Framework));
    assert_eq!(group("min_time_s_per_iteration"), Some(Group::Reporting));
    assert_eq!(group("evaluation_interval"), Some(Group::Evaluation));
    assert_eq!(group("_skip_learners"), Some(Group::Debugging));
    assert_eq!(group("env"), Some(Group::Environment));
    for g in Group::ALL {
        assert_eq!(Group::from_name(g.name()), Some(g));
        assert!(impala_config::keys().iter().any(|k| k.group == g), "{g:?} has no keys");
    }
    assert_eq!(Group::from_name("rollouts"), Some(Group::EnvRunners));
    for alias in ALIASES {
        assert!(impala_config::key_info(alias.canonical).is_some(), "{}", alias.canonical);
        assert!(impala_config::key_info(alias.name).is_none(), "{} is also a key", alias.name);
    }
    Ok(())
}

#[test]
fn builders_set_what_they_name() {
    let config = ImpalaConfig::default()
        .environment(|e| e.env("Acrobot-v1").clip_rewards(None))
        .training(|t| t.lr(3e-4).train_batch_size(512).vtrace(false).grad_clip(20.0))
        .env_runners(|r| r.num_env_runners(64).num_envs_per_env_runner(5))
        .fault_tolerance(|f| f.max_num_env_runner_restarts(7))
        .learners(|l| l.num_learners(1))
        .framework(|f| f.precision(impala_config::Precision::Bf16Mixed))
        .resources(|r| r.num_gpus(4.0).num_cpus_for_main_process(2.0))
        .reporting(|r| r.min_sample_timesteps_per_iteration(1000))
        .evaluation(|e| e.evaluation_duration(3))
        .debugging(|d| d.seed(Some(1)).skip_learners(true));
    assert_eq!(config.env, "Acrobot-v1");
    assert_eq!(
        (config.lr, config.train_batch_size, config.vtrace, config.grad_clip),
        (3e-4, 512, false, Some(20.0))
    );
    assert_eq!((config.num_env_runners, config.num_envs_per_env_runner), (64, 5));
    assert_eq!(config.max_num_env_runner_restarts, 7);
    assert_eq!(config.num_learners, 1);
    assert_eq!(config.precision, impala_config::Precision::Bf16Mixed);
    assert_eq!((config.num_gpus, config.num_cpus_for_main_process), (4.0, 2.0));
    assert_eq!(config.min_sample_timesteps_per_iteration, 1000);
    assert_eq!(config.evaluation_duration, 3);
    assert_eq!((config.seed, config.skip_learners), (Some(1), true));
}

#[test]
fn an_override_with_a_line_break_is_refused_whole() -> TestResult {
    let mut config = ImpalaConfig::default();
    for text in ["lr=0.1\nnum_env_runners=5", "lr=0.1\r\n"] {
        let err = config.apply_override(text).err().ok_or("a line break was accepted")?;
        assert!(err.to_string().contains("line break"), "{err}");
    }
    assert_eq!(config, ImpalaConfig::default(), "a refused override changed the config");
    Ok(())
}

/// A scalar set on the command line holds over the schedule of the file it overrides, in or out
/// of its group; given with its schedule, the schedule stays.
#[test]
fn an_overridden_scalar_replaces_the_files_schedule() -> TestResult {
    let file = "lr = 0.0003\nlr_schedule = [[0, 0.0003], [1000, 0.0]]\n\
                entropy_coeff = 0.01\nentropy_coeff_schedule = [[0, 0.01], [1000, 0.0]]";
    let base = ImpalaConfig::from_str_as(file, ConfigFormat::Toml)?.config;
    for (sets, lr_schedule, entropy_schedule) in [
        (vec!["lr=0.001"], false, true),
        (vec!["training.lr=0.001"], false, true),
        (vec!["entropy_coeff=0.02"], true, false),
        (vec!["lr=0.001", "entropy_coeff=0.02"], false, false),
        (vec!["lr_schedule=[[0, 0.001], [10, 0.0]]", "lr=0.001"], true, true),
        (vec!["lr=0.001", "lr_schedule=[[0, 0.001], [10, 0.0]]"], true, true),
        (vec!["gamma=0.9"], true, true),
    ] {
        let mut config = base.clone();
        let warnings = config.apply_overrides(&sets)?;
        let kept = (config.lr_schedule.is_some(), config.entropy_coeff_schedule.is_some());
        assert_eq!(kept, (lr_schedule, entropy_schedule), "{sets:?}");
        let dropped =
            warnings.iter().filter(|w| w.kind == WarningKind::ScheduleReplacedByOverride).count();
        assert_eq!(dropped, usize::from(!lr_schedule) + usize::from(!entropy_schedule));
        let (lr, entropy) = (config.lr_at(5000), config.entropy_coeff_at(5000));
        if !lr_schedule {
            assert_eq!(lr, 0.001, "{sets:?}");
        }
        if !entropy_schedule {
            assert_eq!(entropy, 0.02, "{sets:?}");
        }
    }
    Ok(())
}

#[test]
fn other_libraries_names_suggest_the_rllib_key() -> TestResult {
    for (theirs, ours) in [
        ("learning_rate", "lr"),
        ("batch_size", "train_batch_size"),
        ("ent_coef", "entropy_coeff"),
        ("max_grad_norm", "grad_clip"),
        ("unroll_length", "rollout_fragment_length"),
    ] {
        let mut config = ImpalaConfig::default();
        match config.apply_override(&format!("{theirs}=1")) {
            Err(err @ ConfigError::UnknownKey { .. }) => {
                assert!(err.to_string().contains(&format!("`{ours}`")), "{theirs}: {err}");
            }
            other => return Err(format!("{theirs}: expected UnknownKey, got {other:?}").into()),
        }
    }
    // RLlib's own old names are aliases: they set the key, with a deprecation warning.
    let mut config = ImpalaConfig::default();
    config.apply_override("num_workers=3")?;
    assert_eq!(config.num_env_runners, 3);
    Ok(())
}

#[test]
fn the_new_api_stacks_options_are_keys_of_their_groups() -> Result<(), Box<dyn std::error::Error>> {
    let by = impala_config::key_info("grad_clip_by").ok_or("no grad_clip_by")?;
    assert_eq!(
        (by.group, by.expected()),
        (Group::Training, "\"global_norm\", \"norm\" or \"value\"".to_string())
    );
    let mut config = ImpalaConfig::default();
    config.apply_override("grad_clip_by=value")?;
    assert_eq!(config.grad_clip_by, impala_config::GradClipBy::Value);
    let err = config.apply_override("grad_clip_by=sideways").err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("global_norm")), "refused naming the choices");
    let stack =
        impala_config::key_info("enable_rl_module_and_learner").ok_or("no api_stack key")?;
    assert_eq!(stack.group, Group::ApiStack);
    let config = ImpalaConfig::default().api_stack(|a| a.enable_env_runner_and_connector_v2(false));
    assert!(!config.enable_env_runner_and_connector_v2 && config.enable_rl_module_and_learner);
    Ok(())
}
