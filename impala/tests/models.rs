//! Models other than the catalog's through the algorithm: a recurrent TorchScript module
//! learns a task that needs memory, and a Rust `tch` network plugs in with
//! `ImpalaBuilder::model`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala::config::ImpalaConfig;
use impala::core::{CoreError, Env, EnvSpec, Space, StepOutcome};
use impala::learner::{Model, ModelFactory, ModelOutput, Unroll};
use impala::sampler::{EnvContext, EnvFactory};
use impala::{Impala, ImpalaError};
use tch::nn::{self, Module};
use tch::{Device, Tensor};

use crate::common::TestResult;

/// Writes `impala-learner/tests/fixtures/scripted_models.py`'s modules into `dir`.
fn write_modules(dir: &Path) -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The interpreter `./dev setup` made (it has torch), unless IMPALA_PYTHON names one.
    let python = std::env::var_os("IMPALA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let out = Command::new(&python)
        .arg(root.join("impala-learner/tests/fixtures/scripted_models.py"))
        .arg(dir)
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Remember the cue: the first observation shows +1 or -1 (and a flag), the next
/// `DELAY` show nothing, then the action must name the cue's sign (+1 reward, else -1). A
/// policy without memory scores 0 on average; one that remembers scores 1.
struct Recall {
    spec: EnvSpec,
    cue: bool,
    t: usize,
    episode: u64,
}

const DELAY: usize = 3;

impl Recall {
    fn spec() -> Result<EnvSpec, CoreError> {
        Ok(EnvSpec {
            id: "Recall".into(),
            observation_space: Space::continuous(vec![-1.0; 4], vec![1.0; 4])?,
            action_space: Space::Discrete(2),
            max_episode_steps: None,
        })
    }

    fn observe(&self, obs: &mut [f32]) {
        obs.fill(0.0);
        if self.t == 0 {
            obs[0] = if self.cue { 1.0 } else { -1.0 };
            obs[1] = 1.0;
        }
    }
}

impl Env for Recall {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.episode = seed
            .unwrap_or(self.episode)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.cue = (self.episode >> 33) & 1 == 1;
        self.t = 0;
        self.observe(obs);
        Ok(())
    }
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.t += 1;
        self.observe(obs);
        if self.t <= DELAY {
            return Ok(StepOutcome { reward: 0.0, terminated: false, truncated: false });
        }
        let right = (action[0] == 1.0) == self.cue;
        Ok(StepOutcome {
            reward: if right { 1.0 } else { -1.0 },
            terminated: true,
            truncated: false,
        })
    }
}

fn recall_factory() -> Result<EnvFactory, CoreError> {
    let spec = Recall::spec()?;
    Ok(Arc::new(move |ctx: &EnvContext| {
        let episode = ctx.runner_index as u64 * 1000 + ctx.env_index as u64;
        Ok(Box::new(Recall { spec: spec.clone(), cue: false, t: 0, episode }) as Box<dyn Env>)
    }))
}

/// Trains until `episode_return_mean` reaches `target` (or fails after `limit`).
fn train_to(
    algo: &mut Impala,
    target: f64,
    limit: Duration,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    loop {
        let result = algo.train()?;
        if result.episode_return_mean >= target {
            return Ok(result.episode_return_mean);
        }
        if started.elapsed() > limit {
            return Err(format!("did not reach {target}: {}", result.progress_line()).into());
        }
    }
}

#[test]
fn a_recurrent_scripted_module_learns_to_remember() -> TestResult {
    let dir = tempfile::tempdir()?;
    write_modules(dir.path())?;
    let mut config = ImpalaConfig {
        env: "Recall".into(),
        min_time_s_per_iteration: 0.3,
        num_env_runners: 1,
        num_envs_per_env_runner: 8,
        rollout_fragment_length: 8,
        train_batch_size: 256,
        lr: 0.002,
        seed: Some(5),
        ..ImpalaConfig::default()
    };
    config.model.custom_model = Some(dir.path().join("memory_gru.pt").display().to_string());
    let mut algo = Impala::builder(config.validate()?).env_factory(recall_factory()?).build()?;
    let reached = train_to(&mut algo, 0.9, Duration::from_secs(150))?;
    algo.stop()?;
    assert!(reached >= 0.9);
    Ok(())
}

/// A linear policy and value function in plain `tch`: what a Rust user plugs in.
#[derive(Debug)]
struct Linear {
    vs: nn::VarStore,
    pi: nn::Linear,
    vf: nn::Linear,
}

impl Model for Linear {
    fn forward(&self, obs: &Tensor, _: Option<Unroll<'_>>) -> impala::learner::Result<ModelOutput> {
        let values = self.vf.forward(obs).f_squeeze_dim(1)?;
        Ok(ModelOutput { dist_inputs: self.pi.forward(obs), values, state: None })
    }
    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.vs.variables().into_iter().collect()
    }
    fn is_value_parameter(&self, name: &str) -> bool {
        name.starts_with("vf.")
    }
}

#[derive(Debug)]
struct LinearFactory;

impl ModelFactory for LinearFactory {
    fn build(
        &self,
        spec: &EnvSpec,
        device: Device,
        _seed: u64,
    ) -> impala::learner::Result<Box<dyn Model>> {
        // Zeros whatever the seed: every build starts from the same weights.
        let zeros = nn::LinearConfig {
            ws_init: nn::Init::Const(0.0),
            bs_init: Some(nn::Init::Const(0.0)),
            bias: true,
        };
        let vs = nn::VarStore::new(device);
        let obs = spec.observation_space.flat_dim() as i64;
        let pi = nn::linear(vs.root() / "pi", obs, 2, zeros);
        let vf = nn::linear(vs.root() / "vf", obs, 1, zeros);
        Ok(Box::new(Linear { vs, pi, vf }))
    }
}

#[test]
fn a_rust_model_plugs_in_with_the_builder() -> TestResult {
    let config = ImpalaConfig {
        min_time_s_per_iteration: 0.3,
        num_env_runners: 1,
        num_envs_per_env_runner: 4,
        lr: 0.01,
        seed: Some(2),
        ..ImpalaConfig::default()
    };
    let mut algo =
        Impala::builder(config.clone().validate()?).model(Arc::new(LinearFactory)).build()?;
    // A linear policy balances CartPole well past random play (about 22).
    let reached = train_to(&mut algo, 100.0, Duration::from_secs(120))?;
    algo.stop()?;
    assert!(reached >= 100.0);
    // Remote runners build their model from the config, so a factory cannot reach them.
    let err = Impala::builder(config.validate()?)
        .model(Arc::new(LinearFactory))
        .remote_env_runners(Arc::new(impala::runner_pool::RunnerPool::new()))
        .build()
        .err();
    assert!(matches!(err, Some(ImpalaError::ModelFactoryWithRemoteRunners)), "{err:?}");
    Ok(())
}
