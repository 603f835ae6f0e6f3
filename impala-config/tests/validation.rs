//! Every validation rule: a failing case and a passing case; fix-ups and warnings.

use impala_config::{
    ConfigError, ConfigFormat, ConvFilter, ImpalaConfig, LearnerDeviceKind, LearnerPlan,
    ModelConfig, OptType, Rule, Schedule, ValidatedConfig, Violation, WarningKind, MAX_SECONDS,
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
    assert_eq!(validated.config().num_multi_gpu_tower_stacks, 4);
    assert_eq!(validated.config().num_data_loader_buffers, None);
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
    assert_eq!(loaded.config.validate()?.config().num_multi_gpu_tower_stacks, 2);
    Ok(())
}

#[test]
fn minibatch_buffer_is_lowered_to_the_tower_stacks_in_multi_gpu_mode() -> TestResult {
    // One fake GPU: the MultiGPULearnerThread trains (see `learner_plan`).
    let config = ImpalaConfig::default()
        .training(|t| t.minibatch_buffer_size(4).num_sgd_iter(2))
        .resources(|r| r.num_gpus(1.0).fake_gpus(true));
    assert!(config.learner_plan().multi_gpu_thread);
    let validated: ValidatedConfig = config.validate()?;
    assert_eq!(validated.config().minibatch_buffer_size, 1);
    assert_eq!(warnings(&config)?, [WarningKind::MinibatchBufferLowered { from: 4, to: 1 }]);
    // Enough stacks: no fix-up.
    let enough = config.clone().training(|t| t.num_multi_gpu_tower_stacks(4));
    assert_eq!(enough.validate()?.config().minibatch_buffer_size, 4);
    assert_eq!(warnings(&enough)?, []);
    // The simple LearnerThread keeps its buffer: asked for with simple_optimizer, or chosen for
    // one CPU tower (where RLlib's torch default would run the MultiGPULearnerThread too).
    let simple = config.clone().training(|t| t.simple_optimizer(true));
    assert_eq!(simple.validate()?.config().minibatch_buffer_size, 4);
    let cpu = config.resources(|r| r.num_gpus(0.0));
    assert!(!cpu.learner_plan().multi_gpu_thread);
    assert_eq!(cpu.validate()?.config().minibatch_buffer_size, 4);
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
    // The simple LearnerThread trains one device, whose batch needs no split; more towers are
    // refused whatever the batch (SimpleOptimizerOneDevice, below).
    gpus(1.0, 499).training(|t| t.simple_optimizer(true)).validate()?;
    let simple = gpus(3.0, 501).training(|t| t.simple_optimizer(true));
    fails(&simple, Rule::SimpleOptimizerOneDevice, "simple_optimizer")?;
    // The new stack's CPU learners are towers too.
    let learners = |n| ImpalaConfig::default().learners(|l| l.num_learners(n));
    fails(&learners(3), Rule::TrainBatchDivisibleByDevices, "train_batch_size")?;
    learners(4).validate()?;
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
    fails(&separate.clone().training(|t| t.lr_vf(f64::NAN)), Rule::SeparateVfOptimizer, "_lr_vf")?;
    let weighted = separate.training(|t| t.vf_loss_coeff(0.05));
    assert_eq!(warnings(&weighted)?, [WarningKind::VfLossCoeffIgnored]);
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
    let zero_filter = ImpalaConfig::default()
        .training(|t| t.model(|m| m.conv_filters(Some(vec![ConvFilter::square(16, 0, 2)]))));
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

#[test]
fn the_new_rules_do_not_fire_on_the_default_config() -> TestResult {
    let config = ImpalaConfig::default();
    // The switches they watch are off by default (RLlib's defaults), and it validates.
    assert_eq!((config.num_gpus, config.num_gpus_per_learner), (0.0, 0.0));
    assert!(!config.simple_optimizer);
    assert!(!config.vtrace_drop_last_ts);
    assert!(!config.evaluation_parallel_to_training);
    config.validate()?;
    Ok(())
}

#[test]
fn learner_gpus_are_asked_for_one_way_only() -> TestResult {
    let both = ImpalaConfig::default()
        .resources(|r| r.num_gpus(1.0))
        .learners(|l| l.num_gpus_per_learner(1.0));
    fails(&both, Rule::LearnerGpusTwice, "num_gpus_per_learner")?;
    let message = violations(&both)?[0].to_string();
    assert!(message.contains("`num_gpus` = 1"), "{message}");
    ImpalaConfig::default().resources(|r| r.num_gpus(1.0)).validate()?;
    ImpalaConfig::default().learners(|l| l.num_gpus_per_learner(1.0)).validate()?;
    Ok(())
}

#[test]
fn num_gpus_per_learner_is_whole_or_one_shared_gpu() -> TestResult {
    let per_learner = |gpus, learners| {
        ImpalaConfig::default().learners(|l| l.num_gpus_per_learner(gpus).num_learners(learners))
    };
    fails(&per_learner(1.5, 1), Rule::WholeGpus, "num_gpus_per_learner")?;
    let fix = violations(&per_learner(1.5, 1))?[0].fix.clone();
    assert!(fix.contains("1 or 2"), "{fix}");
    // Two learners cannot share a GPU; one learner can have a fraction of one.
    fails(&per_learner(0.5, 2), Rule::WholeGpus, "num_gpus_per_learner")?;
    per_learner(0.5, 1).validate()?;
    per_learner(0.5, 0).validate()?;
    per_learner(2.0, 1).validate()?;
    per_learner(1.0, 2).validate()?;
    Ok(())
}

#[test]
fn simple_optimizer_trains_one_device() -> TestResult {
    let simple = ImpalaConfig::default().training(|t| t.simple_optimizer(true));
    simple.validate()?;
    simple.clone().resources(|r| r.num_gpus(1.0)).validate()?;
    for towers in [
        simple.clone().resources(|r| r.num_gpus(2.0)),
        simple.clone().resources(|r| r.num_gpus(2.0).fake_gpus(true)),
        simple.clone().learners(|l| l.num_learners(2)),
        simple.learners(|l| l.num_learners(2).num_gpus_per_learner(1.0)),
    ] {
        fails(&towers, Rule::SimpleOptimizerOneDevice, "simple_optimizer")?;
    }
    Ok(())
}

#[test]
fn vtrace_drop_last_ts_needs_fragments_of_two_steps() -> TestResult {
    let drop = |fragment| {
        ImpalaConfig::default()
            .training(|t| t.vtrace_drop_last_ts(true))
            .env_runners(|r| r.rollout_fragment_length(fragment))
    };
    fails(&drop(1), Rule::DropLastTsNeedsTwoSteps, "vtrace_drop_last_ts")?;
    let fix = violations(&drop(1))?[0].fix.clone();
    assert!(fix.contains("rollout_fragment_length"), "{fix}");
    drop(2).validate()?;
    ImpalaConfig::default().env_runners(|r| r.rollout_fragment_length(1)).validate()?;
    Ok(())
}

#[test]
fn parallel_evaluation_needs_evaluation_env_runners() -> TestResult {
    // RLlib refuses it whether or not evaluation is enabled.
    let parallel = ImpalaConfig::default().evaluation(|e| e.evaluation_parallel_to_training(true));
    fails(&parallel, Rule::ParallelEvaluationNeedsRunners, "evaluation_parallel_to_training")?;
    let enabled = parallel.clone().evaluation(|e| e.evaluation_interval(Some(1)));
    fails(&enabled, Rule::ParallelEvaluationNeedsRunners, "evaluation_parallel_to_training")?;
    enabled.evaluation(|e| e.evaluation_num_env_runners(1)).validate()?;
    Ok(())
}

#[test]
fn learner_plans_for_the_old_and_new_stack() -> TestResult {
    use LearnerDeviceKind::{Cpu, Cuda, FakeGpu};
    let default = ImpalaConfig::default;
    // (what, config, kind, towers, MultiGPULearnerThread, train batch, per tower)
    let cases = [
        ("default", default(), Cpu, 1, false, 500, 500),
        ("num_gpus=2", default().resources(|r| r.num_gpus(2.0)), Cuda, 2, true, 500, 250),
        (
            "num_gpus=2, _fake_gpus",
            default().resources(|r| r.num_gpus(2.0).fake_gpus(true)),
            FakeGpu,
            2,
            true,
            500,
            250,
        ),
        ("num_learners=2", default().learners(|l| l.num_learners(2)), Cpu, 2, true, 500, 250),
        (
            "num_learners=2, num_gpus_per_learner=1, train_batch_size_per_learner=256",
            default()
                .learners(|l| l.num_learners(2).num_gpus_per_learner(1.0))
                .training(|t| t.train_batch_size_per_learner(Some(256))),
            Cuda,
            2,
            true,
            512,
            256,
        ),
        (
            "num_gpus_per_learner=0.5",
            default().learners(|l| l.num_gpus_per_learner(0.5)),
            Cuda,
            1,
            true,
            500,
            500,
        ),
        (
            "simple_optimizer on 1 GPU",
            default().resources(|r| r.num_gpus(1.0)).training(|t| t.simple_optimizer(true)),
            Cuda,
            1,
            false,
            500,
            500,
        ),
    ];
    for (what, config, kind, num_devices, multi_gpu_thread, train_batch_size, per_device) in cases {
        let validated = config.validate().map_err(|e| format!("{what}: {e}"))?;
        let expected = LearnerPlan {
            kind,
            num_devices,
            multi_gpu_thread,
            train_batch_size,
            per_device_batch_size: per_device,
        };
        assert_eq!(validated.config().learner_plan(), expected, "{what}");
        assert_eq!(expected.uses_cuda(), kind == Cuda, "{what}");
    }
    let text = default().resources(|r| r.num_gpus(2.0)).learner_plan().to_string();
    assert!(text.contains("2 CUDA tower(s) in one MultiGPULearnerThread"), "{text}");
    Ok(())
}

#[test]
fn evaluation_parallel_to_training_round_trips_through_toml() -> TestResult {
    let config = ImpalaConfig::default().evaluation(|e| {
        e.evaluation_interval(Some(2))
            .evaluation_num_env_runners(1)
            .evaluation_parallel_to_training(true)
    });
    let text = config.to_string_as(ConfigFormat::Toml)?;
    assert!(text.contains("evaluation_parallel_to_training = true"), "{text}");
    let loaded = ImpalaConfig::from_str_as(&text, ConfigFormat::Toml)?;
    assert_eq!(loaded.config, config);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.config.validate()?;

    let written = "evaluation_num_env_runners = 1\nevaluation_parallel_to_training = true\n";
    let loaded = ImpalaConfig::from_str_as(written, ConfigFormat::Toml)?.config;
    assert!(loaded.evaluation_parallel_to_training);
    let mut set = ImpalaConfig::default();
    set.apply_override("evaluation.evaluation_parallel_to_training=true")?;
    assert!(set.evaluation_parallel_to_training);
    Ok(())
}

#[test]
fn ray_scheduling_options_with_nothing_to_act_on_are_refused() -> TestResult {
    let mut config = ImpalaConfig::default();
    config.apply_override("placement_strategy=SPREAD")?;
    fails(&config, Rule::NotSupported, "placement_strategy")?;
    let mut config = ImpalaConfig::default();
    config.apply_override("custom_resources_per_env_runner.tpu=1")?;
    fails(&config, Rule::NotSupported, "custom_resources_per_env_runner.tpu")?;
    let mut config = ImpalaConfig { num_gpus_per_env_runner: 0.5, ..ImpalaConfig::default() };
    fails(&config, Rule::NotSupported, "num_gpus_per_env_runner")?;
    // Zero amounts ask for nothing.
    config.num_gpus_per_env_runner = 0.0;
    config.apply_override("custom_resources_per_env_runner.tpu=0")?;
    config.validate()?;
    Ok(())
}

#[test]
fn ray_env_runner_actors_take_the_ray_scheduling_options() -> TestResult {
    let mut config = ImpalaConfig::default();
    config.apply_override("env_runner_backend=\"ray\"")?;
    config.apply_override("placement_strategy=STRICT_SPREAD")?;
    config.apply_override("custom_resources_per_env_runner.tpu=1")?;
    config.validate()?;
    config.apply_override("env_runner_tls=true")?;
    config.validate()?;
    config.apply_override("num_env_runners=0")?;
    fails(&config, Rule::NotSupported, "num_env_runners")?;
    // The run's certificate goes only to Ray actors; threads need none.
    let mut threads = ImpalaConfig::default();
    threads.apply_override("env_runner_tls=true")?;
    fails(&threads, Rule::NotSupported, "env_runner_tls")?;
    Ok(())
}

#[test]
fn old_stack_gpus_with_several_learners_are_refused() -> TestResult {
    let config =
        ImpalaConfig::default().resources(|r| r.num_gpus(2.0)).learners(|l| l.num_learners(3));
    fails(&config, Rule::LearnerGpusTwice, "num_learners")?;
    Ok(())
}

#[test]
fn lr_that_a_schedule_overrides_is_a_warning() -> TestResult {
    let schedule = Some(Schedule { points: vec![(0, 1e-3), (1000, 1e-4)] });
    let config = ImpalaConfig::default().training(|t| t.lr(1e-3).lr_schedule(schedule.clone()));
    assert!(warnings(&config)?.is_empty());
    let config = ImpalaConfig::default().training(|t| t.lr(1e30).lr_schedule(schedule));
    assert_eq!(warnings(&config)?, [WarningKind::LrIgnoredBySchedule]);
    Ok(())
}

/// A config for `env` with `env_config.<key> = value`.
fn with_env_config(env: &str, key: &str, value: serde_json::Value) -> ImpalaConfig {
    let mut config = ImpalaConfig::default().environment(|e| e.env(env));
    config.env_config.insert(key.into(), value);
    config
}

#[test]
fn atari_frameskip_1_is_refused_and_other_values_warn() -> TestResult {
    let atari = |frameskip| with_env_config("ALE/Pong-v5", "frameskip", frameskip);
    // RLlib's Atari configs set 1 for their own frame-skipping wrapper; here it would turn
    // action repeat off.
    fails(&atari(1.into()), Rule::AtariFrameskip, "env_config.frameskip")?;
    fails(&atari((-2).into()), Rule::AtariFrameskip, "env_config.frameskip")?;
    fails(&atari("4".into()), Rule::AtariFrameskip, "env_config.frameskip")?;
    assert_eq!(warnings(&atari(4.into()))?, []);
    assert_eq!(warnings(&atari(3.into()))?, [WarningKind::AtariFrameskip]);
    // Other envs' frameskip keys are theirs.
    assert_eq!(warnings(&with_env_config("my_pkg.envs:Frames", "frameskip", 1.into()))?, []);
    Ok(())
}

#[test]
fn an_atari_crop_must_be_sides_in_pixels_that_leave_a_grayscale_frame() -> TestResult {
    let atari = |crop| with_env_config("ALE/Pong-v5", "crop", crop);
    assert_eq!(warnings(&atari(serde_json::json!({ "top": 34, "bottom": 16 })))?, []);
    assert_eq!(warnings(&atari(serde_json::json!({})))?, []);
    for bad in [
        serde_json::json!([34, 16]),
        serde_json::json!({ "up": 34 }),
        serde_json::json!({ "top": -1 }),
        serde_json::json!({ "top": 3.5 }),
        serde_json::json!({ "top": 200, "bottom": 10 }),
        serde_json::json!({ "left": 80, "right": 80 }),
        serde_json::json!({ "top": u64::MAX, "bottom": u64::MAX }),
    ] {
        fails(&atari(bad), Rule::AtariCrop, "env_config.crop")?;
    }
    let mut colour = atari(serde_json::json!({ "top": 34 }));
    colour.env_config.insert("grayscale".into(), false.into());
    fails(&colour, Rule::AtariCrop, "env_config.crop")?;
    // Other envs' crop keys are theirs.
    assert_eq!(warnings(&with_env_config("my_pkg.envs:Frames", "crop", "center".into()))?, []);
    Ok(())
}

#[test]
fn shutdown_grace_is_a_non_negative_number_of_seconds() -> TestResult {
    let mut config = ImpalaConfig::default();
    assert_eq!(config.shutdown_grace_s, 5.0);
    config.apply_override("fault_tolerance.shutdown_grace_s=0")?;
    config.validate()?;
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        config.shutdown_grace_s = bad;
        fails(&config, Rule::NonNegativeNumber, "shutdown_grace_s")?;
    }
    Ok(())
}

#[test]
fn evaluation_episodes_are_bounded() -> TestResult {
    let mut config = ImpalaConfig {
        evaluation_interval: Some(1),
        evaluation_duration: impala_config::MAX_EVALUATION_EPISODES,
        ..ImpalaConfig::default()
    };
    config.validate()?;
    config.evaluation_duration += 1;
    fails(&config, Rule::AboveLimit, "evaluation_duration")?;
    Ok(())
}

#[test]
fn custom_model_names_the_resnet_or_a_torchscript_file() -> TestResult {
    use impala_core::{CustomModel, ResNetSettings};
    use serde_json::json;
    let mut config = ImpalaConfig::default();
    assert_eq!(config.clone().validate()?.custom_model(), None);
    config.set("model.custom_model", json!("impala_resnet"))?;
    config.set("model.custom_model_config", json!({"channels": [8, 16], "hidden": 64}))?;
    let resnet = ResNetSettings { channels: vec![8, 16], hidden: 64 };
    assert_eq!(config.clone().validate()?.custom_model(), Some(&CustomModel::ImpalaResNet(resnet)));
    for bad in [
        json!({"channels": []}),
        json!({"channels": [8, 0]}),
        json!({"hidden": 0}),
        json!({"hiden": 8}),
    ] {
        config.set("model.custom_model_config", bad.clone())?;
        let key = bad.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default();
        fails(&config, Rule::CustomModel, &format!("model.custom_model_config.{key}"))?;
    }
    let file = tempfile::NamedTempFile::new()?;
    config.set("model.custom_model", json!(file.path().display().to_string()))?;
    config.set("model.custom_model_config", json!({}))?;
    let path = file.path().to_path_buf();
    assert_eq!(config.clone().validate()?.custom_model(), Some(&CustomModel::TorchScript(path)));
    // A TorchScript module is built already: options for it do nothing, so they are refused.
    config.set("model.custom_model_config", json!({"hidden": 8}))?;
    fails(&config, Rule::CustomModel, "model.custom_model_config.hidden")?;
    config.set("model.custom_model", json!("no/such/file.pt"))?;
    fails(&config, Rule::CustomModel, "model.custom_model")
}

/// Every option in seconds, and whether 0 is refused (it would never wait).
const SECONDS_OPTIONS: [(&str, bool); 7] = [
    ("sample_timeout_s", true),
    ("env_runner_connect_timeout_s", true),
    ("shutdown_grace_s", false),
    ("learner_queue_timeout", false),
    ("timeout_s_sampler_manager", false),
    ("timeout_s_aggregator_manager", false),
    ("min_time_s_per_iteration", false),
];

#[test]
fn every_option_in_seconds_becomes_a_duration_or_is_refused_naming_it() -> TestResult {
    for (key, positive) in SECONDS_OPTIONS {
        let mut config = ImpalaConfig::default();
        // Before: 1e30 passed validation and panicked where it became a Duration.
        for bad in [1e30, 1.000001e9] {
            config.set(key, serde_json::json!(bad))?;
            fails(&config, Rule::TooManySeconds, key)?;
        }
        let rule = if positive { Rule::PositiveNumber } else { Rule::NonNegativeNumber };
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let mut config = ImpalaConfig::default();
            set_seconds(&mut config, key, bad);
            fails(&config, rule, key)?;
        }
        config.set(key, serde_json::json!(MAX_SECONDS))?;
        let durations = config.validate()?.durations();
        let longest = (key, std::time::Duration::from_secs(1_000_000_000));
        assert!(durations.by_option().contains(&longest), "{key}: {durations:?}");
    }
    Ok(())
}

/// Sets the option in seconds `key` to `value`, which JSON cannot carry (NaN, infinity).
fn set_seconds(config: &mut ImpalaConfig, key: &str, value: f64) {
    let field = match key {
        "sample_timeout_s" => &mut config.sample_timeout_s,
        "env_runner_connect_timeout_s" => &mut config.env_runner_connect_timeout_s,
        "shutdown_grace_s" => &mut config.shutdown_grace_s,
        "learner_queue_timeout" => &mut config.learner_queue_timeout,
        "timeout_s_sampler_manager" => &mut config.timeout_s_sampler_manager,
        "timeout_s_aggregator_manager" => &mut config.timeout_s_aggregator_manager,
        _ => &mut config.min_time_s_per_iteration,
    };
    *field = value;
}
