//! Multi-agent training end to end: a coordination game learned with two policies and with
//! one shared policy, a policy left out of `policies_to_train` unchanged to the bit, agents
//! joining and leaving, checkpoints of every policy, and every start-up error (a run too
//! large for the machine too).

use std::time::{Duration, Instant};

use impala::config::{CountStepsBy, ImpalaConfig};
use impala::{Impala, ImpalaError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// HalfObserved (two agents, each seeing one bit; both rewarded when their actions' parity is
/// the bits' parity; 10 steps, so 10 per agent at best and 5 at random) as it learns fast here.
fn half_observed() -> ImpalaConfig {
    let mut c = ImpalaConfig {
        env: "HalfObserved".into(),
        num_env_runners: 1,
        num_envs_per_env_runner: 8,
        rollout_fragment_length: 10,
        train_batch_size: 80,
        lr: 0.003,
        entropy_coeff: 0.003,
        ..ImpalaConfig::default()
    };
    c.model.fcnet_hiddens = vec![16];
    c.min_time_s_per_iteration = 0.25;
    c.metrics_num_episodes_for_smoothing = 50;
    c.seed = Some(3);
    c
}

/// Trains until every policy's mean reward reaches `target` (or `limit` passes).
fn train_until(
    algo: &mut Impala,
    target: f64,
    limit: Duration,
) -> Result<impala::IterationResult, ImpalaError> {
    let started = Instant::now();
    loop {
        let result = algo.train()?;
        let reached = result.policy_reward_mean.values().all(|&r| r >= target);
        if reached || started.elapsed() > limit {
            return Ok(result);
        }
    }
}

#[test]
fn two_policies_learn_to_coordinate() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    let mut algo = Impala::new(config.validate()?)?;
    let result = train_until(&mut algo, 9.5, Duration::from_secs(90))?;
    algo.stop()?;
    println!("{}", result.progress_line());
    assert!(result.policy_reward_mean["left"] >= 9.5, "{:?}", result.policy_reward_mean);
    assert!(result.policy_reward_mean["right"] >= 9.5, "{:?}", result.policy_reward_mean);
    assert!(result.episode_return_mean >= 19.0);
    assert_eq!(result.num_agent_steps_sampled, 2 * result.num_env_steps_sampled);
    assert!(result.info.learner["left"].num_grad_updates_lifetime > 0);
    assert!(result.env_runners.contains_key("module_episode_returns_mean/right"));
    Ok(())
}

#[test]
fn one_shared_policy_learns_for_both_agents() -> TestResult {
    // No `policies`: every agent acts with `default_policy`.
    let mut algo = Impala::new(half_observed().validate()?)?;
    let result = train_until(&mut algo, 19.0, Duration::from_secs(90))?;
    algo.stop()?;
    assert_eq!(result.policy_reward_mean.keys().collect::<Vec<_>>(), ["default_policy"]);
    assert!(result.policy_reward_mean["default_policy"] >= 19.0, "{}", result.progress_line());
    Ok(())
}

#[test]
fn a_policy_not_to_train_keeps_its_weights_to_the_bit() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.policies_to_train = Some(vec!["left".into()]);
    config.min_time_s_per_iteration = 0.2;
    let mut algo = Impala::new(config.validate()?)?;
    let (left, right) = (algo.get_weights("left")?, algo.get_weights("right")?);
    let mut result = algo.train()?;
    while result.info.learner["left"].num_grad_updates_lifetime < 5 {
        result = algo.train()?;
    }
    assert!(!result.info.learner.contains_key("right"), "right has no learner stats");
    assert_eq!(*algo.get_weights("right")?, *right);
    assert_ne!(algo.get_weights("left")?.tensors, left.tensors);
    // Its weights survive a checkpoint unchanged too.
    let dir = tempfile::tempdir()?;
    let checkpoint = algo.save(dir.path())?;
    algo.stop()?;
    let mut restored = Impala::new(config.validate()?)?;
    restored.restore(&checkpoint)?;
    assert_eq!(restored.get_weights("right")?.tensors, right.tensors);
    restored.stop()?;
    Ok(())
}

#[test]
fn agents_leave_mid_episode_and_every_policy_is_reported() -> TestResult {
    // Three CartPole agents, each leaving when its pole falls; the episode goes on without it.
    let mut config = half_observed();
    config.env = "MultiAgentCartPole".into();
    config.env_config.insert("num_agents".into(), 3.into());
    config.policies = vec!["first".into(), "rest".into()];
    config.policy_mapping.insert("agent_0".into(), "first".into());
    config.policy_mapping.insert("agent_*".into(), "rest".into());
    config.count_steps_by = CountStepsBy::AgentSteps;
    config.min_sample_timesteps_per_iteration = 3000;
    // `first` keeps its initial weights, so its agent's return cannot outgrow the two of `rest`
    // (a policy that learns within the iteration can: `first` reached 42 against 45 for both
    // of `rest`'s agents in runs where both learned).
    config.policies_to_train = Some(vec!["rest".into()]);
    let mut algo = Impala::new(config.validate()?)?;
    let result = algo.train()?;
    algo.stop()?;
    assert!(result.episodes_total > 0);
    // Agents that left took no steps while the others played on.
    assert!(result.num_agent_steps_sampled < 3 * result.num_env_steps_sampled);
    assert!(result.num_agent_steps_sampled_this_iter >= 3000);
    assert_eq!(result.timesteps_total, result.num_agent_steps_sampled);
    // Every episode's return is split among the policies, agents that left included, and
    // `rest` sums its two agents' rewards.
    let (first, rest) = (result.policy_reward_mean["first"], result.policy_reward_mean["rest"]);
    let total = result.episode_return_mean;
    assert!((first + rest - total).abs() <= 1e-9 * total, "{first} + {rest} != {total}");
    assert!(rest > first, "{first} {rest}");
    assert_eq!(result.info.learner.keys().collect::<Vec<_>>(), ["rest"]);
    Ok(())
}

#[test]
fn checkpoints_hold_every_policy_and_restore_all_or_one() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.min_time_s_per_iteration = 0.1;
    let mut algo = Impala::new(config.validate()?)?;
    algo.train()?;
    let dir = tempfile::tempdir()?;
    let checkpoint = algo.save(dir.path())?;
    assert!(checkpoint.join("learner/left/model.safetensors").is_file());
    assert!(checkpoint.join("learner/right/model.safetensors").is_file());
    let counters = *algo.counters();
    algo.stop()?;

    // Restored runs do not train before `train()`: their weights are the checkpoint's.
    let mut all = Impala::new(config.validate()?)?;
    let (fresh_left, fresh_right) = (all.get_weights("left")?, all.get_weights("right")?);
    all.restore(dir.path())?;
    let (left, right) = (all.get_weights("left")?, all.get_weights("right")?);
    assert_ne!(left.tensors, fresh_left.tensors);
    assert_ne!(right.tensors, fresh_right.tensors);
    assert_eq!((all.iteration(), *all.counters()), (1, counters));
    let result = all.train()?;
    assert_eq!(result.training_iteration, 2);
    all.stop()?;

    let mut one = Impala::new(config.validate()?)?;
    one.restore_policy(&checkpoint, "left")?;
    assert_eq!(one.get_weights("left")?.tensors, left.tensors);
    assert_eq!(one.get_weights("right")?.tensors, fresh_right.tensors);
    assert_eq!(one.iteration(), 0);
    // The one-policy reader asks for a policy id.
    let err = impala::TrainedPolicy::from_checkpoint(&checkpoint, impala::Device::Cpu)
        .err()
        .map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("multi-agent checkpoint")));
    let err = one.restore_policy(&checkpoint, "middle").err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("no policy `middle`")));
    one.stop()?;

    // A run whose policies differ is told which files are missing.
    let mut shared = Impala::new(half_observed().validate()?)?;
    let err = shared.restore(&checkpoint).err().map(|e| impala::error_chain(&e));
    assert!(err.as_deref().is_some_and(|e| e.contains("default_policy")), "{err:?}");
    shared.stop()?;
    Ok(())
}

#[test]
fn every_start_up_error_names_the_agent_and_the_policy() -> TestResult {
    let refused = |config: ImpalaConfig| -> Result<String, Box<dyn std::error::Error>> {
        match Impala::new(config.validate()?) {
            Ok(mut algo) => {
                algo.stop()?;
                Err("accepted".into())
            }
            Err(e) => Ok(impala::error_chain(&e)),
        }
    };
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.policy_mapping.insert("left".into(), "left".into());
    config.policy_mapping.insert("right".into(), "nobody".into());
    let e = refused(config.clone())?;
    assert!(e.contains("maps `right` to policy `nobody`"), "{e}");

    config.policy_mapping.insert("right".into(), "left".into());
    let e = refused(config.clone())?;
    assert!(e.contains("no agent of the env maps to policy `right`"), "{e}");

    config.policy_mapping.clear();
    config.policies_to_train = Some(vec!["up".into()]);
    let e = refused(config.clone())?;
    assert!(e.contains("policies_to_train` names `up`"), "{e}");

    config.policies_to_train = None;
    config.policies = vec!["left".into(), "../right".into()];
    let e = refused(config.clone())?;
    assert!(e.contains("policy id `../right`"), "{e}");

    let mut unmapped = half_observed();
    unmapped.policies = vec!["left".into(), "rest".into()];
    unmapped.policy_mapping.insert("left".into(), "left".into());
    let e = refused(unmapped)?;
    assert!(e.contains("agent `right` of the env maps to no policy"), "{e}");

    let mut option = half_observed();
    option.clip_rewards = Some(1.0);
    let e = refused(option)?;
    assert!(e.contains("`clip_rewards` does not apply to a multi-agent env"), "{e}");

    let mut env_config = half_observed();
    env_config.env_config.insert("num_agents".into(), 3.into());
    let e = refused(env_config)?;
    assert!(e.contains("unknown env_config key `num_agents` for `HalfObserved`"), "{e}");

    // One algorithm takes either kind of env; a single-agent env refuses multi-agent options.
    let mut algo = Impala::new(half_observed().validate()?)?;
    assert_eq!(algo.policy_ids(), ["default_policy"]);
    assert!(algo.multi_agent_spec().is_some_and(|spec| spec.agents.len() == 2));
    algo.stop()?;
    let single = ImpalaConfig { policies: vec!["a".into()], ..ImpalaConfig::default() };
    let e = Impala::new(single.validate()?).err().map(|e| e.to_string());
    assert!(e.is_some_and(|e| e.contains("single-agent env")));
    Ok(())
}

#[test]
fn a_run_too_large_for_the_machine_is_refused_with_the_policies_shares() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.policy_mapping.insert("left".into(), "left".into());
    config.policy_mapping.insert("right".into(), "right".into());
    config.train_batch_size = 1_000_000_000_000;
    match Impala::new(config.validate()?) {
        Ok(mut algo) => {
            algo.stop()?;
            Err("train batches of 10^12 agent steps per policy were accepted".into())
        }
        Err(e) => {
            assert!(matches!(e, ImpalaError::MemoryBudget { .. }), "{e}");
            let e = e.to_string();
            assert!(e.contains("per policy (2 policies)") && e.contains("train_batch_size"), "{e}");
            Ok(())
        }
    }
}

#[test]
fn each_policy_may_learn_with_its_own_model_and_training_options() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.min_time_s_per_iteration = 0.1;
    config.policy_config.insert(
        "right".into(),
        serde_json::from_str(r#"{"lr": 0.0001, "model": {"fcnet_hiddens": [32, 32]}}"#)?,
    );
    let mut algo = Impala::new(config.clone().validate()?)?;
    let width = |algo: &Impala, policy: &str| -> Result<Vec<usize>, ImpalaError> {
        let weights = algo.get_weights(policy)?;
        Ok(weights
            .tensors
            .iter()
            .filter(|t| t.name.ends_with("weight"))
            .map(|t| t.shape[0])
            .collect())
    };
    assert_eq!(width(&algo, "left")?, [2, 16, 1]);
    assert_eq!(width(&algo, "right")?, [2, 32, 32, 1]);
    let mut result = algo.train()?;
    while result.info.learner.values().any(|l| l.num_grad_updates_lifetime == 0) {
        result = algo.train()?;
    }
    let lr = |p: &str| result.info.learner[p].learner_stats["cur_lr"];
    assert!((lr("left") - 0.003).abs() < 1e-9 && (lr("right") - 0.0001).abs() < 1e-9);
    let dir = tempfile::tempdir()?;
    let checkpoint = algo.save(dir.path())?;
    algo.stop()?;
    // A run whose `right` model differs cannot restore it.
    config.policy_config.clear();
    let mut other = Impala::new(config.clone().validate()?)?;
    let err = other.restore(&checkpoint).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("policy `right`'s model"), "{err}");
    // The keys that differ, not a debug dump of both models.
    assert!(
        err.contains("fcnet_hiddens = [32,32]") && err.contains("fcnet_hiddens = [16]"),
        "{err}"
    );
    assert!(!err.contains("ModelConfig {"), "{err}");
    other.stop()?;
    // Only training() and model options differ per policy; unknown policies are refused.
    config.policy_config.insert("right".into(), serde_json::from_str(r#"{"num_env_runners": 2}"#)?);
    let err = Impala::new(config.clone().validate()?).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("policy_config.right.num_env_runners")));
    config.policy_config.clear();
    config.policy_config.insert("middle".into(), serde_json::from_str(r#"{"lr": 0.1}"#)?);
    let err = Impala::new(config.validate()?).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("policy_config` has an entry for `middle`")));
    Ok(())
}

#[test]
fn each_trained_policy_mixes_in_its_own_replay() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    // Half of each train batch replayed from the policy's own buffer (RLlib's mix-in replay).
    config.replay_proportion = 1.0;
    config.replay_buffer_num_slots = 16;
    config.min_time_s_per_iteration = 0.2;
    let mut algo = Impala::new(config.validate()?)?;
    let mut result = algo.train()?;
    while result.info.learner.values().any(|l| l.num_grad_updates_lifetime < 5) {
        result = algo.train()?;
    }
    algo.stop()?;
    // Replayed rows are trained on too: each policy trained on more agent steps than it sampled.
    let sampled_per_policy = result.num_agent_steps_sampled / 2;
    for policy in ["left", "right"] {
        let trained = result.info.learner[policy].num_agent_steps_trained;
        assert!(trained > sampled_per_policy, "{policy}: {trained} <= {sampled_per_policy}");
    }
    Ok(())
}

#[test]
fn evaluation_runs_every_policy_on_evaluation_env_runners_or_beside_training() -> TestResult {
    let mut config = half_observed();
    config.policies = vec!["left".into(), "right".into()];
    config.min_time_s_per_iteration = 0.1;
    config.evaluation_interval = Some(1);
    config.evaluation_duration = 12;
    config.evaluation_num_env_runners = 2;
    let mut algo = Impala::new(config.clone().validate()?)?;
    let result = algo.train()?;
    algo.stop()?;
    let evaluation = result.evaluation.ok_or("no evaluation")?;
    assert_eq!(evaluation.num_episodes, 12);
    assert_eq!(evaluation.episode_len_mean, 10.0);
    assert_eq!(evaluation.policy_reward_mean.keys().collect::<Vec<_>>(), ["left", "right"]);
    // Beside training: the iteration waits for the round.
    config.evaluation_parallel_to_training = true;
    let mut algo = Impala::new(config.validate()?)?;
    let result = algo.train()?;
    algo.stop()?;
    let evaluation = result.evaluation.ok_or("no parallel evaluation")?;
    assert_eq!(evaluation.num_episodes, 12);
    assert!(evaluation.policy_reward_mean["right"].is_finite());
    Ok(())
}
