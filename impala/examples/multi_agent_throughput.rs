//! Multi-agent overhead, as one JSON line per round: MultiAgentCartPole with 2 agents on
//! `E/2` envs (so `E` agent lanes) against CartPole-v1 on `E` envs through the single-agent
//! path, same model, fragments and train batches, training included. Both are measured in agent
//! steps per second (one per env step for the single agent), in alternating rounds of `SECONDS`
//! each, once with one policy shared by both agents and once with a policy per agent.
//!
//! ```text
//! cargo run --release -p impala --example multi_agent_throughput -- [ROUNDS] [SECONDS]
//! ```

use std::time::Instant;

use impala::config::ImpalaConfig;
use impala::{Impala, IterationResult, Trainable};

const LANES: usize = 8;

fn base(seconds: f64) -> ImpalaConfig {
    let mut c = ImpalaConfig {
        num_env_runners: 1,
        rollout_fragment_length: 10,
        train_batch_size: 80,
        min_time_s_per_iteration: seconds,
        seed: Some(0),
        ..ImpalaConfig::default()
    };
    c.model.fcnet_hiddens = vec![64, 64];
    c
}

/// Agent steps sampled and trained per second over one iteration (after a warm-up one).
fn measure(algo: &mut dyn Trainable) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    algo.train()?;
    let started = Instant::now();
    let r: IterationResult = algo.train()?;
    let wall = started.elapsed().as_secs_f64();
    algo.stop()?;
    Ok((
        r.num_agent_steps_sampled_this_iter as f64 / wall,
        r.num_agent_steps_trained_this_iter as f64 / wall,
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(Ok(3), |a| a.parse())?;
    let seconds: f64 = args.get(2).map_or(Ok(10.0), |a| a.parse())?;
    for round in 1..=rounds {
        let mut single = base(seconds);
        single.env = "CartPole-v1".into();
        single.num_envs_per_env_runner = LANES;
        let (single_sampled, single_trained) = measure(&mut Impala::new(single.validate()?)?)?;
        let mut shared = base(seconds);
        shared.env = "MultiAgentCartPole".into();
        shared.num_envs_per_env_runner = LANES / 2;
        let (shared_sampled, shared_trained) =
            measure(&mut Impala::new(shared.clone().validate()?)?)?;
        let mut per_agent = shared;
        per_agent.policies = vec!["agent_0".into(), "agent_1".into()];
        let (two_sampled, two_trained) = measure(&mut Impala::new(per_agent.validate()?)?)?;
        println!(
            "{}",
            serde_json::json!({
                "round": round,
                "single_agent_steps_per_s": {"sampled": single_sampled, "trained": single_trained},
                "multi_agent_shared_policy": {
                    "sampled": shared_sampled,
                    "trained": shared_trained,
                    "ratio_sampled": shared_sampled / single_sampled,
                },
                "multi_agent_two_policies": {
                    "sampled": two_sampled,
                    "trained": two_trained,
                    "ratio_sampled": two_sampled / single_sampled,
                },
            })
        );
    }
    Ok(())
}
