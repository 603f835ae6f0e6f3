//! Learning that holds, with several policies: with nothing to learn every policy keeps its
//! entropy, and two independent learners that can only score together settle on a signal.
//!
//! Both on `SignalingGame` (a speaker that sees a bit, a listener that sees the speaker's
//! symbol; different observation spaces, one policy each). The settings are those under which
//! the bare-PyTorch reference (`scripts/bare_impala.py`) holds: with `lr = 0.001` Adam's
//! steps on pure-noise advantages drive a 256x256 network's policy deterministic within a few
//! hundred updates, in that reference as here (docs/LEARNING.md), and a speaker that settled on
//! one symbol before the listener read it leaves nothing to coordinate on.

use std::time::{Duration, Instant};

use impala::config::ImpalaConfig;
use impala::{Impala, IterationResult};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// SignalingGame paying `reward` ("signal" or "coin"), a policy per agent.
fn signaling(reward: &str, seed: u64) -> ImpalaConfig {
    let mut c = ImpalaConfig {
        env: "SignalingGame".into(),
        policies: vec!["speaker".into(), "listener".into()],
        num_env_runners: 1,
        num_envs_per_env_runner: 16,
        rollout_fragment_length: 20,
        train_batch_size: 640,
        lr: 0.0001,
        entropy_coeff: 0.01,
        min_time_s_per_iteration: 1.0,
        metrics_num_episodes_for_smoothing: 100,
        seed: Some(seed),
        ..ImpalaConfig::default()
    };
    c.env_config.insert("reward".into(), reward.into());
    c
}

/// Trains until `done` holds for a result or `limit` passes; the last result.
fn train_until(
    algo: &mut Impala,
    limit: Duration,
    done: impl Fn(&IterationResult) -> bool,
) -> Result<IterationResult, impala::ImpalaError> {
    let started = Instant::now();
    loop {
        let result = algo.train()?;
        if done(&result) || started.elapsed() > limit {
            return Ok(result);
        }
    }
}

fn entropy(result: &IterationResult, policy: &str) -> f64 {
    result.info.learner[policy].learner_stats["entropy"]
}

#[test]
fn with_nothing_to_learn_every_policy_keeps_its_entropy() -> TestResult {
    let mut algo = Impala::new(signaling("coin", 1).validate()?)?;
    // 1,000 updates each: the bare-PyTorch reference ends them at 0.665-0.676.
    let updates = |r: &IterationResult| {
        r.info.learner.values().map(|p| p.num_grad_updates_lifetime).min().unwrap_or(0)
    };
    let result = train_until(&mut algo, Duration::from_secs(300), |r| updates(r) >= 1000)?;
    algo.stop()?;
    assert!(updates(&result) >= 1000, "{}", result.progress_line());
    for policy in ["speaker", "listener"] {
        let (entropy, floor) = (entropy(&result, policy), 0.9 * 2f64.ln());
        assert!(entropy >= floor, "{policy}'s entropy fell to {entropy} (< {floor})");
    }
    Ok(())
}

#[test]
fn two_independent_learners_settle_on_a_signal() -> TestResult {
    for seed in 1..=3 {
        let started = Instant::now();
        let mut algo = Impala::new(signaling("signal", seed).validate()?)?;
        let scored = |r: &IterationResult| r.policy_reward_mean.values().all(|&m| m >= 8.0);
        let result = train_until(&mut algo, Duration::from_secs(240), scored)?;
        algo.stop()?;
        println!(
            "seed {seed}: {:?} after {} env steps, {:.0} s",
            result.policy_reward_mean,
            result.num_env_steps_sampled,
            started.elapsed().as_secs_f64()
        );
        // 9 a game at best, 4.5 when the symbol means nothing.
        assert!(scored(&result), "seed {seed}: {}", result.progress_line());
    }
    Ok(())
}
