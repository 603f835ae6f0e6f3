//! Python multi-agent envs through the worker bridge: PettingZoo's parallel and AEC APIs and
//! RLlib's `MultiAgentEnv` API, agents joining and leaving, several envs per worker.

use impala_core::{MultiAgentEnv, MultiAgentStep};
use impala_gym::{EnvKind, GymEnvPool, GymError};

use crate::{settings, settings_n, TestResult};

#[test]
fn a_pettingzoo_parallel_env_is_probed_and_stepped_per_agent() -> TestResult {
    let pool = GymEnvPool::new(settings_n("impala_test_envs:HalfObservedParallel", 2, 2));
    let EnvKind::Multi(spec) = pool.probe_kind()? else { return Err("not multi-agent".into()) };
    let ids: Vec<&str> = spec.agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["left", "right"]);
    // Two envs in one worker, each agent a slot.
    let mut envs = [pool.make_multi_agent(0, 0, 0)?, pool.make_multi_agent(0, 0, 1)?];
    assert_eq!(envs[0].worker_pid(), envs[1].worker_pid());
    let mut obs = [spec.observation_buffers(), spec.observation_buffers()];
    let mut actions = spec.action_buffers();
    let mut out = [MultiAgentStep::new(2), MultiAgentStep::new(2)];
    for (e, env) in envs.iter_mut().enumerate() {
        env.reset(Some(e as u64), &mut obs[e], &mut out[e])?;
        assert_eq!(out[e].acting().collect::<Vec<_>>(), [0, 1]);
    }
    let mut total = [0.0; 2];
    for step in 1..=10 {
        for e in 0..2 {
            // Both play their bit: the parities always match.
            actions[0][0] = obs[e][0][0];
            actions[1][0] = obs[e][1][0];
            envs[e].begin_step(&actions)?;
        }
        for env in &mut envs {
            env.flush_steps()?;
        }
        for e in 0..2 {
            envs[e].finish_step(&mut obs[e], &mut out[e])?;
            total[e] += out[e].agents[0].reward;
            assert_eq!(out[e].episode_done(), step == 10);
        }
    }
    assert_eq!(total, [10.0, 10.0]);
    assert!(out[0].all_terminated && !out[0].all_truncated);
    // The single-agent API refuses it, naming the fix.
    let err = pool.make(0, 0, 0).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("is a multi-agent env"), "{err}");
    Ok(())
}

#[test]
fn agents_join_and_leave_through_rllibs_api() -> TestResult {
    let pool = GymEnvPool::new(settings("impala_test_envs:JoinAndLeave"));
    let mut env = pool.make_multi_agent(0, 0, 0)?;
    let spec = env.spec().clone();
    let (mut obs, actions) = (spec.observation_buffers(), spec.action_buffers());
    let mut out = MultiAgentStep::new(2);
    env.reset(None, &mut obs, &mut out)?;
    assert_eq!(out.acting().collect::<Vec<_>>(), [0]);
    env.step(&actions, &mut obs, &mut out)?;
    assert_eq!(out.acting().collect::<Vec<_>>(), [0, 1], "late joined");
    assert_eq!((out.agents[0].reward, out.agents[1].reward), (1.0, 0.0));
    env.step(&actions, &mut obs, &mut out)?;
    assert!(out.agents[0].terminated && out.agents[0].observed, "early left, final observation");
    assert_eq!(out.acting().collect::<Vec<_>>(), [1]);
    assert_eq!(obs[1][0], 2.0);
    env.step(&actions, &mut obs, &mut out)?;
    assert!(!out.episode_done());
    env.step(&actions, &mut obs, &mut out)?;
    assert!(out.all_truncated && out.agents[1].truncated && !out.agents[0].observed);
    Ok(())
}

#[test]
fn a_pettingzoo_aec_env_steps_through_aec_to_parallel() -> TestResult {
    let pool = GymEnvPool::new(settings("pettingzoo.classic.rps_v2:env"));
    let mut env = pool.make_multi_agent(0, 0, 0)?;
    let spec = env.spec().clone();
    assert_eq!(spec.num_agents(), 2);
    let (mut obs, mut actions) = (spec.observation_buffers(), spec.action_buffers());
    let mut out = MultiAgentStep::new(2);
    env.reset(Some(0), &mut obs, &mut out)?;
    (actions[0][0], actions[1][0]) = (0.0, 1.0); // rock against paper
    env.step(&actions, &mut obs, &mut out)?;
    assert_eq!((out.agents[0].reward, out.agents[1].reward), (-1.0, 1.0));
    // An action outside the agent's space is refused before it reaches Python.
    actions[0][0] = 7.0;
    assert!(env.step(&actions, &mut obs, &mut out).is_err());
    Ok(())
}

#[test]
fn a_single_agent_env_is_refused_as_multi_agent() -> TestResult {
    let pool = GymEnvPool::new(settings("impala_test_envs:MatchBit"));
    match pool.make_multi_agent(0, 0, 0) {
        Err(GymError::WrongKind { found, .. }) => assert_eq!(found, "a single-agent env"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    Ok(())
}
