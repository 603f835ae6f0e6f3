//! Exported policies run in plain PyTorch (`torch.jit.load`) with the outputs impala-rs
//! computes: the catalog's MLP, CNN and LSTM, a Gaussian head, TorchScript custom models, and
//! the observation filter folded in.

use std::path::{Path, PathBuf};
use std::process::Command;

use impala_core::{CustomModel, EnvSpec, Policy, PolicyInput, PolicyOutput, ResNetSettings, Space};
use impala_learner::{ExportFilter, ModelSettings, TorchPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::common::{nz, spec, TestResult};
use crate::custom_models::modules;

/// Each job's module outputs in plain PyTorch (one Python process for all of them).
fn torch_outputs(
    jobs: &[serde_json::Value],
    dir: &Path,
) -> Result<Vec<Vec<Vec<f32>>>, Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("IMPALA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../.venv/bin/python"));
    let file = dir.join("jobs.json");
    std::fs::write(&file, serde_json::Value::Array(jobs.to_vec()).to_string())?;
    let out = Command::new(&python)
        .arg(root.join("tests/fixtures/run_exported.py"))
        .arg(&file)
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    let outputs: Vec<Vec<serde_json::Value>> = serde_json::from_slice(&out.stdout)?;
    Ok(outputs.iter().map(|job| job.iter().map(flatten).collect()).collect())
}

fn nest(values: &[f32], dims: &[usize]) -> serde_json::Value {
    match dims {
        [] | [_] => serde_json::json!(values),
        [_, rest @ ..] => {
            let inner: usize = rest.iter().product();
            serde_json::Value::Array(values.chunks(inner.max(1)).map(|c| nest(c, rest)).collect())
        }
    }
}

fn flatten(value: &serde_json::Value) -> Vec<f32> {
    match value {
        serde_json::Value::Array(items) => items.iter().flat_map(flatten).collect(),
        serde_json::Value::Number(n) => vec![n.as_f64().unwrap_or(f64::NAN) as f32],
        _ => vec![f32::NAN],
    }
}

fn assert_close(what: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len(), "{what}: {ours:?} vs {theirs:?}");
    for (a, b) in ours.iter().zip(theirs) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{what}: {ours:?} vs {theirs:?}");
    }
}

/// What impala-rs computes for an exported module's inputs: its name, logits, values and
/// next state.
type Expected = (String, Vec<f32>, Vec<f32>, Vec<f32>);

/// Exports `model` for `spec` and computes, in Rust (greedy), the policy's outputs for 5
/// random observations (filtered first, when a filter is given); returns the PyTorch job for
/// the same raw observations and the expected outputs.
fn export(
    name: &str,
    model: &ModelSettings,
    spec: &EnvSpec,
    filter: Option<&ExportFilter>,
    dir: &Path,
) -> Result<(serde_json::Value, Expected), Box<dyn std::error::Error>> {
    let mut policy = TorchPolicy::new(model, spec, 4, 0)?;
    let path = dir.join(format!("{name}.pt"));
    policy.export_torchscript(&path, filter)?;
    let (b, d, sd) = (5, spec.observation_space.flat_dim(), policy.state_dim());
    let mut rng = SmallRng::seed_from_u64(1);
    let raw: Vec<f32> = (0..b * d)
        .map(|_| match &spec.observation_space {
            Space::Bytes { .. } => rng.random_range(0..=255) as f32,
            Space::Discrete(n) => rng.random_range(0..*n) as f32,
            _ => rng.random_range(-2.0..2.0),
        })
        .collect();
    let state: Vec<f32> = (0..b * sd).map(|_| rng.random_range(-0.5..0.5)).collect();
    // The policy sees what the env's filter wrapper gives it.
    let filtered: Vec<f32> = match filter {
        None => raw.clone(),
        Some(f) => raw
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let y = (f64::from(x) - f.mean[i % d]) / f.std[i % d];
                f.clip.map_or(y, |c| y.clamp(-c, c)) as f32
            })
            .collect(),
    };
    let mut out = PolicyOutput::default();
    policy.compute_actions(
        &PolicyInput { obs: &filtered, num_envs: b, state: &state, explore: false },
        &mut out,
    )?;
    // Nested as `[B, *shape]`, as numpy's reshape of the flat rows.
    let mut dims = vec![b];
    dims.extend(spec.observation_space.shape());
    let job = serde_json::json!({
        "module": path,
        "obs": nest(&raw, &dims),
        "state": (sd > 0).then(|| nest(&state, &[b, sd])),
    });
    Ok((job, (name.to_owned(), out.action_dist_inputs, out.vf_preds, out.state_out)))
}

#[test]
fn exported_policies_give_impala_rss_outputs_in_plain_pytorch() -> TestResult {
    let dir = tempfile::tempdir()?;
    let cartpole = spec(4, Space::Discrete(2));
    let mlp = ModelSettings { fcnet_hiddens: vec![16, 16], ..ModelSettings::default() };
    let filter = ExportFilter {
        mean: vec![0.5, -1.0, 0.0, 2.0],
        std: vec![0.5, 2.0, 1.0, 0.1],
        clip: Some(3.0),
    };
    let lstm = ModelSettings { use_lstm: true, lstm_cell_size: nz(8), ..mlp.clone() };
    let frames = EnvSpec {
        id: "Frames".into(),
        observation_space: Space::Bytes { shape: vec![10, 10, 2] },
        action_space: Space::Discrete(3),
        max_episode_steps: None,
    };
    let resnet = ModelSettings {
        custom_model: Some(CustomModel::ImpalaResNet(ResNetSettings {
            channels: vec![4, 8],
            hidden: 16,
        })),
        use_lstm: true,
        lstm_cell_size: nz(8),
        ..ModelSettings::default()
    };
    let gaussian = spec(3, Space::continuous(vec![-1.0; 2], vec![1.0; 2])?);
    let free = ModelSettings { free_log_std: true, ..mlp.clone() };
    let one_hot = EnvSpec { observation_space: Space::Discrete(5), ..cartpole.clone() };
    let mut cases = vec![
        ("mlp", mlp.clone(), cartpole.clone(), None),
        ("mlp_filtered", mlp.clone(), cartpole.clone(), Some(&filter)),
        ("lstm", lstm, cartpole.clone(), None),
        ("cnn", ModelSettings::default(), frames.clone(), None),
        ("impala_resnet_lstm", resnet, frames, None),
        ("gaussian", free, gaussian, None),
        ("one_hot", mlp, one_hot, None),
    ];
    for module in ["residual_mlp", "counter"] {
        let scripted = ModelSettings {
            custom_model: Some(CustomModel::TorchScript(modules()?.join(format!("{module}.pt")))),
            ..ModelSettings::default()
        };
        cases.push((module, scripted, cartpole.clone(), None));
    }
    let (mut jobs, mut expected) = (Vec::new(), Vec::new());
    for (name, model, spec, filter) in &cases {
        let (job, wanted) = export(name, model, spec, *filter, dir.path())?;
        jobs.push(job);
        expected.push(wanted);
    }
    let outputs = torch_outputs(&jobs, dir.path())?;
    assert_eq!(outputs.len(), expected.len());
    for ((name, logits, values, state), theirs) in expected.iter().zip(&outputs) {
        assert_close(&format!("{name} logits"), logits, &theirs[0]);
        assert_close(&format!("{name} value"), values, &theirs[1]);
        if !state.is_empty() {
            assert_close(&format!("{name} state"), state, &theirs[2]);
        } else {
            assert_eq!(theirs.len(), 2, "{name}: a stateless module returns (logits, value)");
        }
    }
    Ok(())
}

#[test]
fn a_filter_of_another_size_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let policy = TorchPolicy::new(&ModelSettings::default(), &spec(4, Space::Discrete(2)), 0, 0)?;
    let filter = ExportFilter { mean: vec![0.0; 3], std: vec![1.0; 3], clip: None };
    let err = policy.export_torchscript(&dir.path().join("p.pt"), Some(&filter)).err();
    let text = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("3 means") && text.contains("4 observation values"), "{text}");
    assert!(!dir.path().join("p.pt").exists());
    Ok(())
}
