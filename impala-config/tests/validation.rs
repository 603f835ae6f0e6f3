//! Every validation rule: a failing case and a passing case; fix-ups and warnings.

use impala_config::{
    ConfigError, ImpalaConfig, ModelConfig, OptType, Rule, Schedule, ValidatedConfig, Violation,
    WarningKind,
};

use crate::TestResult;

/// The violations of `config`, or an error if it validates.
fn violations(config: &ImpalaConfig) -> Result<Vec<Violation>, String> {
    match config.validate() {
        Err(ConfigError::Invalid { violations }) => Ok(violations),
        Err(other) => Err(format!("unexpected error {other}")),
        Ok(_) => Err("expected the config to be invalid".into()),
    }
}

/// Asserts `config` breaks exactly `rule` at `key` (and nothing else).
fn fails(config: &ImpalaConfig, rule: Rule, key: &str) -> TestResult {
    let found = violations(config)?;
    let pairs: Vec<(Rule, &str)> = found.iter().map(|v| (v.rule, v.key.as_str())).collect();
    assert_eq!(pairs, [(rule, key)], "{found:?}");
    let text = found[0].to_string();
    assert!(text.contains(&format!("`{key}`")) && text.contains("fix:"), "{text}");
    Ok(())
}

/// The warnings of a valid `config`.
fn warnings(config: &ImpalaConfig) -> Result<Vec<WarningKind>, ConfigError> {
    Ok(config.validate()?.warnings().iter().map(|w| w.kind.clone()).collect())
}

#[test]
fn the_default_config_is_valid_without_warnings() -> TestResult {
    let validated = ImpalaConfig::default().validate()?;
    assert!(validated.warnings().is_empty(), "{:?}", validated.warnings());
    assert_eq!(validated.config(), &ImpalaConfig::default());
    Ok(())
}

#[test]
fn all_problems_are_reported_at_once() -> TestResult {
    let config = ImpalaConfig::default()
        .environment(|e| e.env(""))
        .training(|t| t.lr(0.0).train_batch_size(0).model(|m| m.fcnet_activation("sigmoid")))
        .debugging(|d| d.log_level("LOUD"));
    let found = violations(&config)?;
    let keys: Vec<&str> = found.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(keys, ["env", "lr", "train_batch_size", "model.fcnet_activation", "log_level"]);
    let message = config.validate().err().ok_or("expected an error")?.to_string();
    assert!(message.starts_with("5 problem(s) in the config:"), "{message}");
    Ok(())
}

#[test]
fn entropy_coeff_must_not_be_negative() -> TestResult {
    fails(
        &ImpalaConfig::default().training(|t| t.entropy_coeff(-0.01)),
        Rule::EntropyCoeffNonNegative,
        "entropy_coeff",
    )?;
    fails(
        &ImpalaConfig::default().training(|t| t.entropy_coeff(f64::NAN)),
        Rule::EntropyCoeffNonNegative,
        "entropy_coeff",
    )?;
    ImpalaConfig::default().training(|t| t.entropy_coeff(0.0)).validate()?;
    Ok(())
}

#[test]
fn aggregation_workers_are_at_most_the_env_runners() -> TestResult {
    let config = |aggregators, runners| {
        ImpalaConfig::default()
            .training(|t| t.num_aggregation_workers(aggregators))
            .env_runners(|r| r.num_env_runners(runners))
    };
    fails(&config(3, 2), Rule::AggregationWorkersWithinEnvRunners, "num_aggregation_workers")?;
    assert_eq!(warnings(&config(1, 2))?, []);
    assert_eq!(warnings(&config(0, 0))?, []);
    // RLlib warns above num_workers / 2.
    assert_eq!(warnings(&config(2, 3))?, [WarningKind::AggregationWorkersAboveHalf]);
    assert_eq!(warnings(&config(2, 2))?, [WarningKind::AggregationWorkersAboveHalf]);
    Ok(())
}

#[test]
fn num_data_loader_buffers_is_deprecated_and_moves_to_tower_stacks() -> TestResult {
    let config = ImpalaConfig { num_data_loader_buffers: Some(4), ..ImpalaConfig::default() };
    let validated = config.validate()?;
    assert_eq!(validated.num_multi_gpu_tower_stacks, 4);
    assert_eq!(validated.num_data_loader_buffers, None);
    let expected = WarningKind::DeprecatedKey {
        old: "num_data_loader_buffers".into(),
        new: "num_multi_gpu_tower_stacks".into(),
    };
    assert_eq!(warnings(&config)?, [expected]);
    // Through a file too.
    let loaded = ImpalaConfig::from_str_as(
        "num_data_loader_buffers = 2\n",
        impala_config::ConfigFormat::Toml,
    )?;
    assert_eq!(loaded.config.validate()?.num_multi_gpu_tower_stacks, 2);
    Ok(())
}

#[test]
fn minibatch_buffer_is_lowered_to_the_tower_stacks_in_multi_gpu_mode() -> TestResult {
    let config = ImpalaConfig::default().training(|t| t.minibatch_buffer_size(4).num_sgd_iter(2));
    let validated: ValidatedConfig = config.validate()?;
    assert_eq!(validated.minibatch_buffer_size, 1);
    assert_eq!(warnings(&config)?, [WarningKind::MinibatchBufferLowered { from: 4, to: 1 }]);
    // Enough stacks: no fix-up.
    let enough = config.clone().training(|t| t.num_multi_gpu_tower_stacks(4));
    assert_eq!(enough.validate()?.minibatch_buffer_size, 4);
    assert_eq!(warnings(&enough)?, []);
    // The simple LearnerThread keeps its buffer.
    let simple = config.training(|t| t.simple_optimizer(true));
    assert_eq!(simple.validate()?.minibatch_buffer_size, 4);
    Ok(())
}

#[test]
fn a_minibatch_buffer_without_sgd_passes_is_unused() -> TestResult {
    let config = ImpalaConfig::default()
        .training(|t| t.minibatch_buffer_size(2).num_multi_gpu_tower_stacks(2));
    assert_eq!(warnings(&config)?, [WarningKind::MinibatchBufferUnused]);
    assert_eq!(warnings(&config.training(|t| t.num_sgd_iter(2)))?, []);
    Ok(())
}

#[test]
fn the_train_batch_splits_over_the_learner_devices() -> TestResult {
    let gpus = |n: f64, batch| {
        ImpalaConfig::default()
            .training(|t| t.train_batch_size(batch))
            .resources(|r| r.num_gpus(n).fake_gpus(true))
    };
    fails(&gpus(3.0, 500), Rule::TrainBatchDivisibleByDevices, "train_batch_size")?;
    let message = violations(&gpus(3.0, 500))?[0].fix.clone();
    assert!(message.contains("498 or 501"), "{message}");
    gpus(4.0, 500).validate()?;
    gpus(0.5, 499).validate()?;
    gpus(3.0, 500).training(|t| t.simple_optimizer(true)).validate()?;
    let per_learner = gpus(2.0, 500).training(|t| t.train_batch_size_per_learner(Some(255)));
    fails(&per_learner, Rule::TrainBatchDivisibleByDevices, "train_batch_size_per_learner")?;
    Ok(())
}

#[test]
fn a_separate_vf_optimizer_needs_a_vf_learning_rate() -> TestResult {
    let config = ImpalaConfig::default().training(|t| t.separate_vf_optimizer(true));
    assert_eq!(warnings(&config)?, [WarningKind::SeparateVfOptimizerSharedLayers]);
    let separate = config.training(|t| t.model(|m| m.vf_share_layers(false)));
    assert_eq!(warnings(&separate)?, []);
    fails(&separate.clone().training(|t| t.lr_vf(0.0)), Rule::SeparateVfOptimizer, "_lr_vf")?;
    fails(&separate.training(|t| t.lr_vf(f64::NAN)), Rule::SeparateVfOptimizer, "_lr_vf")?;
    let ignored = ImpalaConfig::default().training(|t| t.lr_vf(1e-3));
    assert_eq!(warnings(&ignored)?, [WarningKind::LrVfIgnored]);
    ImpalaConfig::default().training(|t| t.lr_vf(0.0)).validate()?;
    Ok(())
}

#[test]
fn sizes_must_be_positive() -> TestResult {
    for key in [
        "train_batch_size",
        "rollout_fragment_length",
        "num_envs_per_env_runner",
        "learner_queue_size",
        "num_sgd_iter",
        "minibatch_buffer_size",
        "num_multi_gpu_tower_stacks",
        "broadcast_interval",
        "max_requests_in_flight_per_sampler_worker",
        "max_requests_in_flight_per_aggregator_worker",
        "num_gpu_loader_threads",
        "num_learner_threads",
        "metrics_num_episodes_for_smoothing",
        "train_batch_size_per_learner",
        "model.framestack",
    ] {
        let mut config = ImpalaConfig::default();
        config.set(key, serde_json::json!(0))?;
        fails(&config, Rule::PositiveSize, key)?;
        config.set(key, serde_json::json!(1))?;
        assert!(config.validate().is_ok(), "{key} = 1: {:?}", config.validate());
    }
    let zero_layer =
        ImpalaConfig::default().training(|t| t.model(|m| m.fcnet_hiddens(vec![64, 0])));
    fails(&zero_layer, Rule::PositiveSize, "model.fcnet_hiddens[1]")?;
    let zero_filter =
        ImpalaConfig::default().training(|t| t.model(|m| m.conv_filters(Some(vec![[16, 0, 2]]))));
    fails(&zero_filter, Rule::PositiveSize, "model.conv_filters[0]")?;
    let lstm = ImpalaConfig::default().training(|t| t.model(|m| m.lstm_cell_size(0)));
    lstm.validate()?; // Unused without use_lstm.
    fails(
        &lstm.training(|t| t.model(|m| m.use_lstm(true))),
        Rule::PositiveSize,
        "model.lstm_cell_size",
    )?;
    let eval = ImpalaConfig::default().evaluation(|e| e.evaluation_duration(0));
    eval.validate()?; // Unused without evaluation.
    fails(
        &eval.evaluation(|e| e.evaluation_interval(Some(1))),
        Rule::PositiveSize,
        "evaluation_duration",
    )?;
    Ok(())
}

#[test]
fn thresholds_must_be_positive_when_set() -> TestResult {
    for key in
        ["vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold", "grad_clip", "clip_rewards"]
    {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut config = ImpalaConfig::default();
            config.set(key, serde_json::json!(0.5))?;
            config.validate()?;
            config.set(key, serde_json::Value::Null)?;
            config.validate()?;
            // Non-finite values cannot travel through JSON; set them directly.
            match key {
                "vtrace_clip_rho_threshold" => config.vtrace_clip_rho_threshold = Some(bad),
                "vtrace_clip_pg_rho_threshold" => config.vtrace_clip_pg_rho_threshold = Some(bad),
                "grad_clip" => config.grad_clip = Some(bad),
                _ => config.clip_rewards = Some(bad),
            }
            fails(&config, Rule::PositiveThreshold, key)?;
        }
    }
    Ok(())
}

#[test]
fn lr_must_be_positive_unless_a_schedule_sets_it() -> TestResult {
    for bad in [0.0, -1e-3, f64::NAN, f64::INFINITY] {
        let config = ImpalaConfig::default().training(|t| t.lr(bad));
        fails(&config, Rule::PositiveNumber, "lr")?;
        let scheduled =
            config.training(|t| t.lr_schedule(Some(Schedule { points: vec![(0, 1e-3)] })));
        scheduled.validate()?;
    }
    Ok(())
}

#[test]
fn rmsprop_needs_a_positive_epsilon() -> TestResult {
    let config = ImpalaConfig::default().training(|t| t.epsilon(0.0).momentum(-1.0));
    config.validate()?; // Adam ignores them.
    let rmsprop = config.training(|t| t.opt_type(OptType::Rmsprop));
    let rules: Vec<(Rule, String)> =
        violations(&rmsprop)?.into_iter().map(|v| (v.rule, v.key)).collect();
    assert_eq!(
        rules,
        [(Rule::PositiveNumber, "epsilon".into()), (Rule::NonNegativeNumber, "momentum".into())]
    );
    rmsprop.training(|t| t.epsilon(0.1).momentum(0.0)).validate()?;
    Ok(())
}

#[test]
fn gamma_is_in_the_unit_interval() -> TestResult {
    for bad in [-0.1, 1.1, f64::NAN] {
        fails(
            &ImpalaConfig::default().training(|t| t.gamma(bad)),
            Rule::GammaInUnitInterval,
            "gamma",
        )?;
    }
    for good in [0.0, 1.0] {
        ImpalaConfig::default().training(|t| t.gamma(good)).validate()?;
    }
    Ok(())
}

#[test]
fn schedules_are_non_empty_sorted_and_finite() -> TestResult {
    let with = |points: Vec<(u64, f64)>| {
        ImpalaConfig::default().training(|t| t.entropy_coeff_schedule(Some(Schedule { points })))
    };
    fails(&with(vec![]), Rule::Schedule, "entropy_coeff_schedule")?;
    fails(
        &with(vec![(0, 0.1), (100, 0.0), (50, 0.05)]),
        Rule::Schedule,
        "entropy_coeff_schedule[2]",
    )?;
    fails(&with(vec![(0, 0.1), (100, f64::NAN)]), Rule::Schedule, "entropy_coeff_schedule[1]")?;
    fails(&with(vec![(0, -0.1)]), Rule::Schedule, "entropy_coeff_schedule[0]")?;
    // Equal timesteps make a step, as RLlib allows.
    assert_eq!(warnings(&with(vec![(0, 0.1), (100, 0.1), (100, 0.0)]))?, []);
    assert_eq!(warnings(&with(vec![(10, 0.1)]))?, [WarningKind::ScheduleStartsAfterZero]);
    let lr = ImpalaConfig::default().training(|t| t.lr_schedule(Some(Schedule { points: vec![] })));
    fails(&lr, Rule::Schedule, "lr_schedule")?;
    Ok(())
}

#[test]
fn replay_needs_a_non_negative_proportion_and_slots() -> TestResult {
    let replay = |p, slots| {
        ImpalaConfig::default().training(|t| t.replay_proportion(p).replay_buffer_num_slots(slots))
    };
    fails(&replay(1.0, 0), Rule::ReplayNeedsSlots, "replay_buffer_num_slots")?;
    fails(&replay(-0.5, 10), Rule::NonNegativeNumber, "replay_proportion")?;
    fails(&replay(f64::NAN, 10), Rule::NonNegativeNumber, "replay_proportion")?;
    replay(1.0, 10).validate()?;
    replay(0.0, 0).validate()?;
    Ok(())
}

#[test]
fn timeouts_coefficients_and_resources_are_not_negative() -> TestResult {
    for key in [
        "learner_queue_timeout",
        "timeout_s_sampler_manager",
        "timeout_s_aggregator_manager",
        "min_time_s_per_iteration",
        "vf_loss_coeff",
        "num_gpus",
        "num_cpus_for_main_process",
        "num_cpus_per_env_runner",
        "num_gpus_per_env_runner",
        "num_gpus_per_learner",
    ] {
        let mut config = ImpalaConfig::default();
        config.set(key, serde_json::json!(-1.0))?;
        fails(&config, Rule::NonNegativeNumber, key)?;
        config.set(key, serde_json::json!(0.0))?;
        config.validate()?;
    }
    let mut config = ImpalaConfig::default();
    config.apply_override("custom_resources_per_env_runner.tpu=-1")?;
    fails(&config, Rule::NonNegativeNumber, "custom_resources_per_env_runner.tpu")?;
    Ok(())
}

#[test]
fn activation_names_must_be_known() -> TestResult {
    for key in ["fcnet_activation", "conv_activation", "post_fcnet_activation"] {
        let mut config = ImpalaConfig::default();
        config.set(&format!("model.{key}"), serde_json::json!("sigmoid"))?;
        fails(&config, Rule::ActivationName, &format!("model.{key}"))?;
        for good in ModelConfig::ACTIVATIONS {
            config.set(&format!("model.{key}"), serde_json::json!(good))?;
            config.validate()?;
        }
    }
    Ok(())
}

#[test]
fn log_level_env_and_gpus_are_checked() -> TestResult {
    fails(
        &ImpalaConfig::default().debugging(|d| d.log_level("LOUD")),
        Rule::LogLevel,
        "log_level",
    )?;
    ImpalaConfig::default().debugging(|d| d.log_level("info")).validate()?;
    fails(&ImpalaConfig::default().environment(|e| e.env(" ")), Rule::EnvName, "env")?;
    fails(&ImpalaConfig::default().resources(|r| r.num_gpus(1.5)), Rule::WholeGpus, "num_gpus")?;
    ImpalaConfig::default().resources(|r| r.num_gpus(0.5)).validate()?;
    ImpalaConfig::default().resources(|r| r.num_gpus(2.0)).validate()?;
    Ok(())
}

#[test]
fn train_batches_smaller_or_uneven_against_sample_batches_warn() -> TestResult {
    let batch = |train| ImpalaConfig::default().training(|t| t.train_batch_size(train));
    assert_eq!(warnings(&batch(40))?, [WarningKind::TrainBatchSmallerThanSampleBatch]);
    assert_eq!(warnings(&batch(120))?, [WarningKind::TrainBatchNotMultipleOfSampleBatch]);
    assert_eq!(warnings(&batch(100))?, []);
    let envs = batch(100).env_runners(|r| r.num_envs_per_env_runner(4));
    assert_eq!(envs.sample_batch_size(), 200);
    assert_eq!(warnings(&envs)?, [WarningKind::TrainBatchSmallerThanSampleBatch]);
    Ok(())
}

#[test]
fn replay_ratio_is_p_over_one_plus_p() {
    let ratio = |p| ImpalaConfig::default().training(|t| t.replay_proportion(p)).replay_ratio();
    assert_eq!(ratio(0.0), 0.0);
    assert_eq!(ratio(1.0), 0.5);
    assert_eq!(ratio(3.0), 0.75);
    // RLlib's 1/p would give 2.0 here, i.e. no replay at all.
    assert!((ratio(0.5) - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn batch_sizes_and_schedule_lookups() {
    let config = ImpalaConfig::default().learners(|l| l.num_learners(2));
    assert_eq!((config.learner_train_batch_size(), config.total_train_batch_size()), (250, 500));
    let config = ImpalaConfig::default().training(|t| {
        t.entropy_coeff_schedule(Some(Schedule { points: vec![(0, 0.02), (100, 0.0)] }))
    });
    assert_eq!(config.entropy_coeff_at(50), 0.01);
    assert_eq!(config.lr_at(50), config.lr);
    assert!(!config.evaluation_enabled());
    assert!(!config.clone().evaluation(|e| e.evaluation_interval(Some(0))).evaluation_enabled());
    assert!(config.evaluation(|e| e.evaluation_interval(Some(2))).evaluation_enabled());
}
