//! The model seam with TorchScript modules: modules that keep the contract train and act,
//! modules that break it are refused when built, with what was expected and what came back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use impala_core::{CustomModel, EnvSpec, Policy, PolicyInput, PolicyOutput, ResNetSettings, Space};
use impala_learner::{Learner, LearnerError, LearnerSettings, ModelSettings, TorchPolicy, Unroll};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tch::{Device, Tensor};

use crate::common::{max_weight_diff, nz, paired_loss_stats, random_batch, spec, TestResult};

/// The modules of `fixtures/scripted_models.py`, written once per test run.
pub fn modules() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir =
            std::env::temp_dir().join(format!("impala-scripted-models-{}", std::process::id()));
        // The interpreter `./dev setup` made (it has torch), unless IMPALA_PYTHON names one.
        let python = std::env::var_os("IMPALA_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("../.venv/bin/python"));
        let out = Command::new(&python)
            .arg(root.join("tests/fixtures/scripted_models.py"))
            .arg(&dir)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(dir)
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(Clone::clone)
}

fn scripted(name: &str) -> Result<LearnerSettings, String> {
    let model = ModelSettings {
        custom_model: Some(CustomModel::TorchScript(modules()?.join(format!("{name}.pt")))),
        ..ModelSettings::default()
    };
    Ok(LearnerSettings { model, ..LearnerSettings::default() })
}

#[test]
fn a_scripted_module_trains_and_its_runners_act_with_the_learners_weights() -> TestResult {
    let settings = scripted("residual_mlp")?;
    let spec = spec(4, Space::Discrete(2));
    let mut learner = Learner::new(&settings, &spec, Device::Cpu)?;
    let mut policy = TorchPolicy::new(&settings.model, &spec, 0, 1)?;
    let batch = random_batch(&spec, 10, 4, 0, 7);
    let before = learner.weights()?;
    for _ in 0..3 {
        let stats = learner.update(&batch, 0)?;
        assert!(stats.total_loss.is_finite() && stats.grad_gnorm > 0.0);
    }
    let after = learner.weights()?;
    assert!(before.tensors.iter().zip(&after.tensors).any(|(a, b)| a.data != b.data));
    // The module's own parameter names key the weights.
    assert!(after.tensors.iter().any(|t| t.name == "value_head.0.weight"), "{:?}", after.tensors);
    policy.set_weights(&after)?;
    let mut out = PolicyOutput::default();
    let obs = [0.1f32; 8];
    policy.compute_actions(
        &PolicyInput { obs: &obs, num_envs: 2, state: &[], explore: true },
        &mut out,
    )?;
    assert_eq!((out.actions.len(), out.action_dist_inputs.len(), out.vf_preds.len()), (2, 4, 2));
    Ok(())
}

#[test]
fn a_separate_value_optimizer_trains_the_modules_value_parameters() -> TestResult {
    let mut settings = scripted("residual_mlp")?;
    settings.optimizer.separate_vf_optimizer = true;
    let spec = spec(4, Space::Discrete(2));
    let mut learner = Learner::new(&settings, &spec, Device::Cpu)?;
    let stats = learner.update(&random_batch(&spec, 10, 4, 0, 7), 0)?;
    assert!(stats.total_loss.is_finite());
    Ok(())
}

#[test]
fn a_recurrent_module_carries_its_state() -> TestResult {
    let settings = scripted("memory_gru")?;
    let spec = spec(4, Space::Discrete(2));
    let mut learner = Learner::new(&settings, &spec, Device::Cpu)?;
    let mut policy = TorchPolicy::new(&settings.model, &spec, 0, 1)?;
    assert_eq!(policy.state_dim(), 32);
    let mut out = PolicyOutput::default();
    let (obs, state) = ([0.5f32; 8], [0.0f32; 64]);
    policy.compute_actions(
        &PolicyInput { obs: &obs, num_envs: 2, state: &state, explore: true },
        &mut out,
    )?;
    assert_eq!(out.state_out.len(), 64);
    assert!(out.state_out.iter().any(|&s| s != 0.0), "the GRU's state moved");
    let stats = learner.update(&random_batch(&spec, 6, 3, 32, 9), 0)?;
    assert!(stats.total_loss.is_finite());
    Ok(())
}

#[test]
fn episodes_start_from_the_modules_initial_state() -> TestResult {
    let settings = scripted("counter")?;
    let spec = spec(4, Space::Discrete(2));
    let mut policy = TorchPolicy::new(&settings.model, &spec, 0, 1)?;
    // Runners start every episode from zeros, which stand for get_initial_state() (5).
    let obs = [0.0f32; 4];
    assert_eq!(policy.compute_values(&obs, 1, &[0.0])?, vec![5.0]);
    let mut out = PolicyOutput::default();
    policy.compute_actions(
        &PolicyInput { obs: &obs, num_envs: 1, state: &[0.0], explore: true },
        &mut out,
    )?;
    assert_eq!((out.vf_preds[0], out.state_out[0]), (5.0, 1.0));
    let mut next = PolicyOutput::default();
    policy.compute_actions(
        &PolicyInput { obs: &obs, num_envs: 1, state: &out.state_out, explore: true },
        &mut next,
    )?;
    assert_eq!(next.vf_preds[0], 6.0);
    Ok(())
}

#[test]
fn modules_that_break_the_contract_are_refused_when_built() -> TestResult {
    let spec = spec(4, Space::Discrete(2));
    for (name, needles) in [
        ("broken_width", &["logits", "[2, 2]", "2 logits", "[2, 3]"][..]),
        ("broken_value", &["values", "[2] or [2, 1]", "[2, 2]"][..]),
        ("broken_raises", &["forward raised", "this module wants 7 observations"][..]),
        ("broken_nan", &["NaN or inf"][..]),
        ("broken_not_torchscript", &["cannot be loaded as TorchScript", "torch.jit.script"][..]),
    ] {
        let settings = scripted(name)?;
        for err in [
            Learner::new(&settings, &spec, Device::Cpu).err(),
            TorchPolicy::new(&settings.model, &spec, 0, 0).err(),
        ] {
            let err = err.ok_or(format!("{name} was accepted"))?;
            assert!(matches!(err, LearnerError::Model { .. }), "{name}: {err}");
            let text = err.to_string();
            for needle in needles {
                assert!(text.contains(needle), "{name}: `{needle}` not in `{text}`");
            }
        }
    }
    Ok(())
}

#[test]
fn scripted_modules_on_three_towers_make_one_towers_update() -> TestResult {
    let spec = spec(4, Space::Discrete(2));
    for name in ["residual_mlp", "memory_gru"] {
        let settings = scripted(name)?;
        let mut one = Learner::new(&settings, &spec, Device::Cpu)?;
        let mut many = Learner::with_devices(&settings, &spec, &[Device::Cpu; 3])?;
        let state_dim = one.model().state_dim();
        for seed in 0..2 {
            let batch = random_batch(&spec, 6, 7, state_dim, seed);
            let (a, b) = (one.update(&batch, 0)?, many.update(&batch, 0)?);
            assert!(
                (a.total_loss - b.total_loss).abs() <= 1e-4 * (1.0 + a.total_loss.abs()),
                "{name}"
            );
            assert!((a.grad_gnorm - b.grad_gnorm).abs() <= 1e-4 * (1.0 + a.grad_gnorm), "{name}");
        }
        let diff = max_weight_diff(&one.weights()?, &many.weights()?);
        assert!(diff < 1e-5, "{name}: weights differ by {diff}");
    }
    Ok(())
}

/// `impala_resnet` with `use_lstm`: the runner's step-by-step inference carries the LSTM's
/// state, the learner's unroll over the same steps gives the same values, and it trains.
#[test]
fn impala_resnet_with_an_lstm_carries_its_state_and_trains() -> TestResult {
    let spec = EnvSpec {
        id: "Frames".into(),
        observation_space: Space::Bytes { shape: vec![12, 12, 2] },
        action_space: Space::Discrete(3),
        max_episode_steps: None,
    };
    let settings = LearnerSettings {
        model_seed: 5,
        model: ModelSettings {
            custom_model: Some(CustomModel::ImpalaResNet(ResNetSettings {
                channels: vec![4, 8],
                hidden: 16,
            })),
            use_lstm: true,
            lstm_cell_size: nz(8),
            ..ModelSettings::default()
        },
        ..LearnerSettings::default()
    };
    let mut learner = Learner::new(&settings, &spec, Device::Cpu)?;
    let mut policy = TorchPolicy::new(&settings.model, &spec, settings.model_seed, 0)?;
    let (t, b, sd, obs_dim) = (4, 2, 16, 12 * 12 * 2);
    assert_eq!(policy.state_dim(), sd, "h and c of 8 each");

    // The runner acts step by step from the zero state, carrying the state it gets back.
    let mut rng = SmallRng::seed_from_u64(2);
    let mut obs = Vec::with_capacity(t * b * obs_dim);
    let (mut state, mut values) = (vec![0.0f32; b * sd], Vec::with_capacity(t * b));
    let mut out = PolicyOutput::default();
    for _ in 0..t {
        let step: Vec<f32> = (0..b * obs_dim).map(|_| f32::from(rng.random::<u8>())).collect();
        policy.compute_actions(
            &PolicyInput { obs: &step, num_envs: b, state: &state, explore: true },
            &mut out,
        )?;
        assert_eq!(out.state_out.len(), b * sd);
        assert_ne!(out.state_out, state, "the LSTM's state moved");
        state.clone_from(&out.state_out);
        values.extend_from_slice(&out.vf_preds);
        obs.extend(step);
    }

    // The learner unrolls the same steps from the same state.
    let obs = Tensor::f_from_slice(&obs)?.f_view([(t * b) as i64, obs_dim as i64])?;
    let state_in = Tensor::f_zeros([b as i64, sd as i64], (tch::Kind::Float, Device::Cpu))?;
    let unroll = Unroll { steps: t, rows: b, state: &state_in, not_done: None };
    let fwd = learner.model().forward(&obs, Some(unroll))?;
    let unrolled = Vec::<f32>::try_from(&fwd.values.f_detach()?)?;
    let final_state = fwd.state.ok_or(LearnerError::Batch { reason: "no state".into() })?;
    let final_state = Vec::<f32>::try_from(&final_state.f_flatten(0, -1)?.f_detach()?)?;
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
    assert!(close(&unrolled, &values), "{unrolled:?} vs {values:?}");
    assert!(close(&final_state, &state));

    // And trains on batches that carry a state in.
    let before = learner.weights()?;
    let stats = learner.update(&random_batch(&spec, 6, 3, sd, 4), 0)?;
    assert!(stats.total_loss.is_finite() && stats.grad_gnorm > 0.0, "{stats:?}");
    assert!(max_weight_diff(&before, &learner.weights()?) > 0.0);
    Ok(())
}

/// The built-in `[64, 64]` tanh model and the same network written in PyTorch (`catalog_mlp`),
/// from the same weights, over the same batches: every loss term, the gradient norm and the
/// weights after each optimizer step agree, so a custom module trains exactly as the built-in
/// model does and any difference in learning comes from the module itself.
#[test]
fn a_scripted_copy_of_the_builtin_mlp_trains_exactly_as_the_builtin_mlp() -> TestResult {
    let spec = spec(4, Space::Discrete(2));
    // RLlib's tuned CartPole settings.
    let mut builtin = LearnerSettings::default();
    builtin.model.fcnet_hiddens = vec![64, 64];
    builtin.model.vf_share_layers = false;
    builtin.optimizer.lr = 0.0005;
    builtin.optimizer.grad_clip = Some(40.0);
    builtin.loss.vf_loss_coeff = 0.05;
    builtin.loss.entropy_coeff = 0.01;
    let mut scripted = scripted("catalog_mlp")?;
    scripted.optimizer = builtin.optimizer.clone();
    scripted.loss = builtin.loss.clone();
    let mut reference = Learner::new(&builtin, &spec, Device::Cpu)?;
    let mut module = Learner::new(&scripted, &spec, Device::Cpu)?;
    module.set_weights(reference.weights()?.as_ref())?;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(1.0);
    for step in 0..5 {
        let batch = random_batch(&spec, 20, 8, 0, step);
        let (r, m) = (reference.update(&batch, 0)?, module.update(&batch, 0)?);
        for (what, a, b) in paired_loss_stats(&r, &m) {
            assert!(close(a, b), "step {step}: {what} {a} (built-in) vs {b} (TorchScript)");
        }
        let diff = max_weight_diff(&reference.weights()?, &module.weights()?);
        assert!(diff <= 1e-6, "step {step}: weights differ by {diff}");
    }
    Ok(())
}
