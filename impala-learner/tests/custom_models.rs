//! The model seam with TorchScript modules: modules that keep the contract train and act,
//! modules that break it are refused when built, with what was expected and what came back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use impala_core::{CustomModel, Policy, PolicyInput, PolicyOutput, Space};
use impala_learner::{Learner, LearnerError, LearnerSettings, ModelSettings, TorchPolicy};
use tch::Device;

use crate::common::{max_weight_diff, random_batch, spec, TestResult};

/// The modules of `fixtures/scripted_models.py`, written once per test run.
fn modules() -> Result<&'static Path, String> {
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
