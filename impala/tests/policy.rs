//! `TrainedPolicy`: a checkpoint's policy acting in a plain env loop as evaluation acts, refused
//! when the checkpoint is damaged, its weights by name, recurrent state in and out, and its
//! TorchScript export.

use std::path::{Path, PathBuf};

use impala::checkpoint::LEARNER_DIR;
use impala::config::ImpalaConfig;
use impala::learner::MODEL_FILE;
use impala::{evaluate_checkpoint, Impala, ImpalaError, TrainedPolicy};
use tch::Device;

use crate::common::TestResult;

/// What a test returns besides `()`.
type Boxed<T> = Result<T, Box<dyn std::error::Error>>;

fn quick() -> ImpalaConfig {
    let mut config = ImpalaConfig {
        min_time_s_per_iteration: 0.3,
        num_env_runners: 1,
        num_envs_per_env_runner: 4,
        rollout_fragment_length: 10,
        train_batch_size: 80,
        seed: Some(11),
        normalize_observations: true,
        ..ImpalaConfig::default()
    };
    config.model.fcnet_hiddens = vec![32, 32];
    config
}

/// A CartPole checkpoint trained for an iteration (observations normalised, so the saved
/// filter matters).
fn checkpoint(dir: &Path) -> Boxed<PathBuf> {
    let mut algo = Impala::new(quick().validate()?)?;
    algo.train()?;
    let path = algo.save(dir)?;
    algo.stop()?;
    Ok(path)
}

fn message<T: std::fmt::Debug>(result: Result<T, ImpalaError>) -> Result<String, String> {
    match result {
        Ok(v) => Err(format!("expected an error, got {v:?}")),
        Err(e) => Ok(impala::error_chain(&e)),
    }
}

#[test]
fn greedy_actions_in_a_plain_env_loop_score_what_evaluation_scores() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ckpt = checkpoint(dir.path())?;
    let mut policy = TrainedPolicy::from_checkpoint(&ckpt, Device::Cpu)?;
    // Evaluation's single local runner: one env seeded `seed + 1_000_000` on its first reset,
    // reset unseeded after.
    let mut env = impala::envs::make("CartPole-v1", &Default::default())?;
    let mut obs = vec![0.0f32; policy.observation_space().flat_dim()];
    let episodes = 3;
    let (mut total_return, mut total_len) = (0.0, 0u64);
    for episode in 0..episodes {
        env.reset((episode == 0).then_some(11 + 1_000_000), &mut obs)?;
        loop {
            let out = policy.compute_single_action(&obs, &[], false)?;
            let outcome = env.step(&out.actions, &mut obs)?;
            total_return += outcome.reward;
            total_len += 1;
            if outcome.done() {
                break;
            }
        }
    }
    let eval = evaluate_checkpoint(&ckpt, episodes, false)?;
    assert_eq!(eval.num_episodes, episodes as u64);
    assert_eq!(eval.episode_len_mean, total_len as f64 / episodes as f64);
    assert_eq!(eval.episode_return_mean, total_return / episodes as f64);
    Ok(())
}

#[test]
fn a_corrupt_checkpoint_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ckpt = checkpoint(dir.path())?;
    let model = ckpt.join(LEARNER_DIR).join(MODEL_FILE);
    let mut bytes = std::fs::read(&model)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&model, &bytes)?;
    let err = message(TrainedPolicy::from_checkpoint(&ckpt, Device::Cpu))?;
    for needle in ["corrupt checkpoint", "learner/model.safetensors", "load another checkpoint"] {
        assert!(err.contains(needle), "`{needle}` not in `{err}`");
    }
    Ok(())
}

#[test]
fn weights_round_trip_by_name_and_a_mismatch_names_the_parameter() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ckpt = checkpoint(dir.path())?;
    let mut policy = TrainedPolicy::from_checkpoint(&ckpt, Device::Cpu)?;
    let obs = [0.01, -0.02, 0.03, 0.04];
    let before = policy.compute_single_action(&obs, &[], false)?;
    let weights = policy.get_weights();
    let mut reversed = weights.clone();
    reversed.reverse();
    policy.set_weights(reversed)?;
    assert_eq!(policy.get_weights(), weights);
    assert_eq!(policy.compute_single_action(&obs, &[], false)?, before);

    let name = weights[0].name.clone();
    let mut missing = weights.clone();
    missing.remove(0);
    let err = message(policy.set_weights(missing))?;
    assert!(err.contains(&format!("weight `{name}` is missing")), "{err}");

    let mut misshapen = weights.clone();
    misshapen[0].shape.push(1);
    let err = message(policy.set_weights(misshapen))?;
    assert!(err.contains(&format!("weight `{name}` has shape")), "{err}");

    let mut unknown = weights.clone();
    unknown[0].name = "no.such.weight".into();
    let err = message(policy.set_weights(unknown))?;
    assert!(err.contains(&format!("weight `{name}` is missing")), "{err}");
    let mut extra = weights.clone();
    extra.push(impala::core::NamedTensor { name: "extra".into(), shape: vec![1], data: vec![0.0] });
    let err = message(policy.set_weights(extra))?;
    assert!(err.contains("weight `extra` is no parameter of the model"), "{err}");
    // A refused set leaves the weights as they were.
    assert_eq!(policy.get_weights(), weights);
    Ok(())
}

/// The untrained policy of a quick run with an LSTM of 8 cells.
fn lstm_policy() -> Result<TrainedPolicy, Box<dyn std::error::Error>> {
    let mut config = quick();
    config.model.use_lstm = true;
    config.model.lstm_cell_size = 8;
    let mut algo = Impala::new(config.validate()?)?;
    let policy = algo.get_policy()?;
    algo.stop()?;
    Ok(policy)
}

#[test]
fn recurrent_state_goes_in_and_comes_out() -> TestResult {
    let mut policy = lstm_policy()?;
    assert_eq!(policy.state_dim(), 16, "h and c of 8 cells");
    let state = policy.initial_state();
    assert_eq!(state, vec![0.0; 16]);
    let obs = [0.01, -0.02, 0.03, 0.04];
    let first = policy.compute_single_action(&obs, &state, false)?;
    assert_eq!(first.state_out.len(), 16);
    assert!(first.state_out.iter().any(|&x| x != 0.0));
    // An empty state is the initial one; the next step depends on the state it is given.
    assert_eq!(policy.compute_single_action(&obs, &[], false)?, first);
    let second = policy.compute_single_action(&obs, &first.state_out, false)?;
    assert_ne!(second.state_out, first.state_out);
    // A batch acts row by row as single calls do.
    let batch_obs: Vec<f32> = obs.iter().chain(&obs).copied().collect();
    let batch_state: Vec<f32> = state.iter().chain(&first.state_out).copied().collect();
    let batch = policy.compute_actions(&batch_obs, &batch_state, false)?;
    let rows: Vec<f32> = first.state_out.iter().chain(&second.state_out).copied().collect();
    for (a, b) in batch.state_out.iter().zip(&rows) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
    let err = message(policy.compute_single_action(&obs, &[0.0; 3], false))?;
    assert!(err.contains("state holds 3 values; 1 observation(s) need 16 each"), "{err}");
    let err = message(policy.compute_single_action(&obs[..3], &[], false))?;
    assert!(err.contains("observations hold 3 values"), "{err}");
    Ok(())
}

#[test]
fn set_weights_reaches_the_learner_and_a_mismatch_changes_nothing() -> TestResult {
    let mut algo = Impala::new(quick().validate()?)?;
    // Before `train()` no batch reaches the learner, so its weights stay what was set.
    let mut zeroed = algo.get_policy()?.get_weights();
    for w in &mut zeroed {
        w.data.iter_mut().for_each(|x| *x = 0.0);
    }
    algo.set_weights(zeroed.clone())?;
    assert_eq!(algo.get_policy()?.get_weights(), zeroed);
    let mut missing = zeroed[1..].to_vec();
    missing.reverse();
    let err = message(algo.set_weights(missing))?;
    assert!(err.contains(&format!("weight `{}` is missing", zeroed[0].name)), "{err}");
    assert_eq!(algo.get_policy()?.get_weights(), zeroed);
    // Training goes on from the weights set.
    algo.train()?;
    assert_ne!(algo.get_policy()?.get_weights(), zeroed);
    algo.stop()?;
    Ok(())
}

/// `module`'s `forward` on `inputs`, as the tensors of the tuple it returns.
fn run_module(path: &Path, inputs: Vec<tch::Tensor>) -> Boxed<Vec<Vec<f32>>> {
    let module = tch::CModule::load(path)?;
    let args: Vec<tch::IValue> = inputs.into_iter().map(tch::IValue::Tensor).collect();
    let tch::IValue::Tuple(outputs) = module.forward_is(&args)? else {
        return Err("forward returned no tuple".into());
    };
    outputs
        .into_iter()
        .map(|o| match o {
            tch::IValue::Tensor(t) => Ok(Vec::<f32>::try_from(t.flatten(0, -1))?),
            other => Err(format!("forward returned {other:?}").into()),
        })
        .collect()
}

fn assert_close(what: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len(), "{what}: {ours:?} vs {theirs:?}");
    for (a, b) in ours.iter().zip(theirs) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{what}: {ours:?} vs {theirs:?}");
    }
}

#[test]
fn an_exported_checkpoint_policy_folds_in_the_observation_filter() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut policy = TrainedPolicy::from_checkpoint(&checkpoint(dir.path())?, Device::Cpu)?;
    let path = dir.path().join("policy.pt");
    policy.export_torchscript(&path)?;
    // Raw observations, far from the filter's mean: the module must normalise them itself.
    let obs = [0.5f32, -1.5, 0.2, 2.0, -0.3, 0.7, -0.1, -2.5];
    let ours = policy.compute_actions(&obs, &[], false)?;
    let theirs = run_module(&path, vec![tch::Tensor::from_slice(&obs).view([2, 4])])?;
    assert_eq!(theirs.len(), 2, "(logits, value)");
    assert_close("logits", &ours.action_dist_inputs, &theirs[0]);
    assert_close("value", &ours.vf_preds, &theirs[1]);
    let err = message(policy.export_torchscript(&dir.path().join("missing/dir/policy.pt")))?;
    assert!(err.contains("missing/dir/policy.pt"), "{err}");
    Ok(())
}

#[test]
fn an_exported_recurrent_policy_takes_and_returns_its_state() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut policy = lstm_policy()?;
    let path = dir.path().join("lstm.pt");
    policy.export_torchscript(&path)?;
    let obs = [0.01f32, -0.02, 0.03, 0.04];
    let first = policy.compute_single_action(&obs, &policy.initial_state(), false)?;
    let second = policy.compute_single_action(&obs, &first.state_out, false)?;
    let theirs = run_module(
        &path,
        vec![
            tch::Tensor::from_slice(&obs).view([1, 4]),
            tch::Tensor::from_slice(&first.state_out).view([1, 16]),
        ],
    )?;
    assert_eq!(theirs.len(), 3, "(logits, value, state)");
    assert_close("logits", &second.action_dist_inputs, &theirs[0]);
    assert_close("value", &second.vf_preds, &theirs[1]);
    assert_close("state", &second.state_out, &theirs[2]);
    Ok(())
}
