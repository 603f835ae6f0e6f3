//! TorchPolicy: output shapes for every space, log-probs that agree with the learner's
//! distribution, greedy and seeded sampling, weight loading.

use std::sync::Arc;

use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, Space};
use impala_learner::{ActionDistribution, Learner, TorchPolicy};
use tch::{Device, Tensor};

use crate::common::{nz, runner_policy, settings, spec, TestResult};

fn act(
    policy: &mut TorchPolicy,
    obs: &[f32],
    n: usize,
    state: &[f32],
    explore: bool,
) -> Result<PolicyOutput, Box<dyn std::error::Error>> {
    let mut out = PolicyOutput::default();
    policy.compute_actions(&PolicyInput { obs, num_envs: n, state, explore }, &mut out)?;
    Ok(out)
}

fn obs_for(spec: &EnvSpec, n: usize) -> Vec<f32> {
    let dim = match &spec.observation_space {
        Space::Discrete(_) => 1,
        other => other.flat_dim(),
    };
    (0..n * dim).map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5).collect()
}

#[test]
fn output_shapes_for_every_space_and_model() -> TestResult {
    let image = EnvSpec {
        id: "Image".into(),
        observation_space: Space::boxed(vec![0.0; 300], vec![1.0; 300], vec![10, 10, 3])?,
        action_space: Space::Discrete(4),
        max_episode_steps: None,
    };
    let discrete_obs = EnvSpec {
        observation_space: Space::Discrete(5),
        ..spec(1, Space::MultiDiscrete(vec![3, 2]))
    };
    let cases = [
        (spec(4, Space::Discrete(2)), false, false),
        (spec(4, Space::MultiDiscrete(vec![3, 2])), false, true),
        (spec(4, Space::continuous(vec![-1.0; 2], vec![1.0; 2])?), false, false),
        (spec(4, Space::continuous(vec![-1.0; 2], vec![1.0; 2])?), true, true),
        (image, false, false),
        (discrete_obs, true, false),
    ];
    for (s, lstm, free_log_std) in cases {
        let mut c = settings(vec![8]);
        c.model.use_lstm = lstm;
        c.model.lstm_cell_size = nz(5);
        c.model.free_log_std = free_log_std;
        c.model.vf_share_layers = !free_log_std;
        let mut policy = runner_policy(&c, &s, 0)?;
        let n = 3;
        let state_dim = policy.state_dim();
        assert_eq!(state_dim, if lstm { 10 } else { 0 });
        let obs = obs_for(&s, n);
        let out = act(&mut policy, &obs, n, &vec![0.0; n * state_dim], true)?;
        assert_eq!(out.actions.len(), n * s.action_space.flat_dim());
        assert_eq!(out.action_dist_inputs.len(), n * s.action_space.dist_inputs_dim());
        assert_eq!(
            (out.action_logp.len(), out.vf_preds.len(), out.state_out.len()),
            (n, n, n * state_dim)
        );
        for a in out.actions.chunks(s.action_space.flat_dim()) {
            if s.action_space.is_discrete() {
                s.action_space.check_action(a)?;
            }
        }
        assert_eq!(policy.compute_values(&obs, n, &vec![0.0; n * state_dim])?, out.vf_preds);
        // The learner builds the same model from the same seed: its weights fit.
        let learner = Learner::new(&c, &s, Device::Cpu)?;
        policy.set_weights(&learner.weights()?)?;
    }
    Ok(())
}

#[test]
fn logp_agrees_with_the_learner_distribution() -> TestResult {
    let box2 = Space::continuous(vec![-1.0; 2], vec![1.0; 2])?;
    for space in [Space::Discrete(3), Space::MultiDiscrete(vec![3, 2]), box2] {
        let s = spec(4, space.clone());
        let mut policy = runner_policy(&settings(vec![8]), &s, 1)?;
        let n = 16;
        let out = act(&mut policy, &obs_for(&s, n), n, &[], true)?;
        let dist = ActionDistribution::for_space(&space)?;
        let inputs = Tensor::from_slice(&out.action_dist_inputs).view([n as i64, -1]);
        let actions = Tensor::from_slice(&out.actions).view([n as i64, -1]);
        let logp = Vec::<f32>::try_from(&dist.logp(&inputs, &actions)?)?;
        for (a, b) in logp.iter().zip(&out.action_logp) {
            assert!((a - b).abs() < 1e-5, "{space}: libtorch {a}, policy {b}");
        }
        if let Space::Discrete(k) = space {
            // log softmax by hand.
            for (row, (&a, &lp)) in
                out.action_dist_inputs.chunks(k).zip(out.actions.iter().zip(&out.action_logp))
            {
                let lse = row.iter().map(|x| x.exp()).sum::<f32>().ln();
                assert!((row[a as usize] - lse - lp).abs() < 1e-5);
            }
        }
    }
    Ok(())
}

#[test]
fn greedy_actions_are_the_mode_and_sampling_is_seeded() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let c = settings(vec![8]);
    let n = 32;
    let obs = obs_for(&s, n);
    let mut p1 = runner_policy(&c, &s, 42)?;
    let mut p2 = runner_policy(&c, &s, 42)?;
    assert_eq!(act(&mut p1, &obs, n, &[], true)?, act(&mut p2, &obs, n, &[], true)?);
    let greedy = act(&mut p1, &obs, n, &[], false)?;
    for (row, &a) in greedy.action_dist_inputs.chunks(3).zip(&greedy.actions) {
        let best = (0..3).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        assert_eq!(a as usize, best);
    }
    let g = Space::continuous(vec![-1.0; 2], vec![1.0; 2])?;
    let mut pg = runner_policy(&c, &spec(4, g), 0)?;
    let out = act(&mut pg, &obs_for(&spec(4, Space::Discrete(2)), 2), 2, &[], false)?;
    assert_eq!(&out.actions[0..2], &out.action_dist_inputs[0..2]);
    Ok(())
}

#[test]
fn weights_load_and_mismatches_are_rejected() -> TestResult {
    let s = spec(4, Space::Discrete(2));
    let c = settings(vec![8]);
    let mut learner = Learner::new(&c, &s, Device::Cpu)?;
    let mut policy = runner_policy(&c, &s, 0)?;
    let obs = obs_for(&s, 4);
    let before = act(&mut policy, &obs, 4, &[], false)?;
    learner.update(&crate::common::random_batch(&s, 5, 2, 0, 3), 0)?;
    let w = learner.weights()?;
    policy.set_weights(&w)?;
    assert_eq!(policy.weights_version(), 1);
    let after = act(&mut policy, &obs, 4, &[], false)?;
    assert_ne!(before.action_dist_inputs, after.action_dist_inputs);
    let other = Learner::new(&settings(vec![9]), &s, Device::Cpu)?;
    assert!(policy.set_weights(&other.weights()?).is_err());
    let mut truncated = (*w).clone();
    truncated.tensors.pop();
    assert!(policy.set_weights(&Arc::new(truncated)).is_err());
    assert!(act(&mut policy, &obs[..3], 1, &[], true).is_err());
    Ok(())
}

#[test]
fn gaussian_log_std_is_bounded() -> TestResult {
    // A log-std head driven far negative would give std = 0 and log-probs of -inf (non-finite
    // V-trace log-rhos); far positive, a std that swamps the action range.
    let s = spec(4, Space::continuous(vec![-1.0; 2], vec![1.0; 2])?);
    let c = settings(vec![8]);
    let mut policy = runner_policy(&c, &s, 0)?;
    let obs = obs_for(&s, 2);
    for bias in [-1000.0_f32, 1000.0] {
        let mut w = (*Learner::new(&c, &s, Device::Cpu)?.weights()?).clone();
        w.version += 1;
        for t in w.tensors.iter_mut().filter(|t| t.name == "logits.bias") {
            // Inputs are [mean (2), log_std (2)].
            t.data[2..].iter_mut().for_each(|b| *b = bias);
        }
        policy.set_weights(&Arc::new(w))?;
        let out = act(&mut policy, &obs, 2, &[], true)?;
        for row in out.action_dist_inputs.chunks(4) {
            assert!(row[2..].iter().all(|ls| (-20.0..=2.0).contains(ls)), "{row:?}");
        }
        assert!(out.action_logp.iter().all(|lp| lp.is_finite()), "{:?}", out.action_logp);
    }
    Ok(())
}
