//! [`TrainedPolicy`]: a trained policy acting outside training (RLlib's
//! `algo.compute_single_action` / `Policy.from_checkpoint`), from a checkpoint or from a live
//! algorithm's current weights, with no env runners, learner or optimizer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use impala_core::{
    EnvActions, EnvSpec, NamedTensor, Policy, PolicyInput, PolicyOutput, Space, Weights,
};
use impala_envs::MeanStdFilter;
use impala_learner::{ExportFilter, TorchPolicy};
use impala_sampler::EnvFactory;
use tch::Device;

use crate::evaluation::{load_checkpoint_policy, reading_fix, weights_do_not_fit, EnvSource};
use crate::policies::PolicySource;
use crate::{ImpalaError, Result};

/// Greedy actions need no randomness, and sampled ones are seeded by the run's base seed so a
/// loaded policy explores reproducibly; this stream is apart from the env runners'.
const SAMPLE_STREAM: u64 = 0x9011_C700;

/// A trained policy: the model a run trained, with its weights, acting on observations as the
/// run's env runners did. Observations are the env's own (as `env.step` returns them, flat
/// `f32`, `observation_space().flat_dim()` values each); the run's observation filter
/// (`normalize_observations`) is applied with the statistics saved with the weights and never
/// updated, as evaluation does. `explore = false` acts greedily (the argmax of the logits, or
/// the Gaussian's mean); `Box` actions are what the env runners send to the env: mapped from
/// `[-1, 1]` onto the bounds with the run's `normalize_actions`, or clipped with its
/// `clip_actions` ([`EnvActions`](crate::core::EnvActions)). Recurrent models
/// (`use_lstm`, custom models with state) take the state an earlier call returned; a zero state
/// ([`TrainedPolicy::initial_state`]) starts an episode.
///
/// ```
/// use impala::{config::ImpalaConfig, Impala, TrainedPolicy};
///
/// // A CartPole run's checkpoint (any `checkpoint_NNNNNN` folder, or the run folder).
/// let dir = tempfile::tempdir()?;
/// let mut algo = Impala::new(ImpalaConfig { seed: Some(0), ..ImpalaConfig::default() }.validate()?)?;
/// let checkpoint = algo.save(dir.path())?;
/// algo.stop()?;
///
/// let mut policy = TrainedPolicy::from_checkpoint(&checkpoint, tch::Device::Cpu)?;
/// let state = policy.initial_state(); // empty: the default model has no recurrent state
/// let out = policy.compute_single_action(&[0.01, -0.02, 0.03, 0.04], &state, false)?;
/// assert!(out.actions[0] == 0.0 || out.actions[0] == 1.0); // greedy: the larger logit
/// assert_eq!((out.action_dist_inputs.len(), out.vf_preds.len()), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TrainedPolicy {
    policy: TorchPolicy,
    spec: EnvSpec,
    filter: Option<MeanStdFilter>,
    /// What the actions become for the env, as the run's env runners map them.
    env_actions: EnvActions,
    /// The weights the model holds (what [`TrainedPolicy::get_weights`] returns).
    weights: Arc<Weights>,
}

impl std::fmt::Debug for TrainedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainedPolicy")
            .field("env", &self.spec.id)
            .field("weights_version", &self.weights.version)
            .finish_non_exhaustive()
    }
}

impl TrainedPolicy {
    /// Loads the policy of a checkpoint (a `checkpoint_NNNNNN` folder, or a run folder for its
    /// newest checkpoint) onto `device`: the model its config names with the checkpoint's
    /// weights and saved observation filter. One env of the config's `env` is built to read
    /// the spaces the model was built for. The checkpoint's files are verified against its
    /// manifest first; a damaged checkpoint, non-finite weights, or weights that do not fit
    /// the model are refused as [`ImpalaError::CorruptCheckpoint`].
    pub fn from_checkpoint(path: &Path, device: Device) -> Result<Self> {
        Self::load(path, EnvSource::Config, device)
    }

    /// [`TrainedPolicy::from_checkpoint`] for a run trained on envs of the caller's (given to
    /// [`ImpalaBuilder::env_factory`](crate::ImpalaBuilder::env_factory)): one env of
    /// `env_factory`, with the config's wrappers, gives the spaces.
    pub fn from_checkpoint_with_env(
        path: &Path,
        env_factory: EnvFactory,
        device: Device,
    ) -> Result<Self> {
        Self::load(path, EnvSource::Factory(env_factory), device)
    }

    /// [`TrainedPolicy::from_checkpoint`] for a run trained on the envs of a pickled Python
    /// env creator (given to
    /// [`ImpalaBuilder::python_env_creator`](crate::ImpalaBuilder::python_env_creator)): one
    /// env it builds, in an env worker process, gives the spaces.
    pub fn from_checkpoint_with_python_env_creator(
        path: &Path,
        creator: PathBuf,
        device: Device,
    ) -> Result<Self> {
        Self::load(path, EnvSource::PythonCreator(creator), device)
    }

    fn load(path: &Path, envs: EnvSource, device: Device) -> Result<Self> {
        Self::read(path, envs, device).map_err(|e| reading_fix(e, "load"))
    }

    fn read(path: &Path, envs: EnvSource, device: Device) -> Result<Self> {
        let loaded = load_checkpoint_policy(path, envs, |_| {})?;
        let c = loaded.config.config();
        let (normalize, clip) = (c.normalize_actions, c.clip_actions);
        let mut policy = Self::build(&loaded.policies, loaded.filter, (normalize, clip), device)?;
        policy.load_weights(loaded.weights).map_err(|e| match e {
            ImpalaError::PolicyInput { what, problem, .. } => {
                weights_do_not_fit(&loaded.dir, &format!("{what} {problem}"))
            }
            other => weights_do_not_fit(&loaded.dir, &other),
        })?;
        Ok(policy)
    }

    /// A policy of `source`'s model on `device` holding `weights`.
    pub(crate) fn new(
        source: &PolicySource,
        filter: Option<MeanStdFilter>,
        normalize_and_clip_actions: (bool, bool),
        weights: Arc<Weights>,
        device: Device,
    ) -> Result<Self> {
        let mut policy = Self::build(source, filter, normalize_and_clip_actions, device)?;
        policy.load_weights(weights)?;
        Ok(policy)
    }

    /// `source`'s model on `device`, with its initial weights until [`Self::load_weights`].
    fn build(
        source: &PolicySource,
        filter: Option<MeanStdFilter>,
        (normalize_actions, clip_actions): (bool, bool),
        device: Device,
    ) -> Result<Self> {
        let seed = source.base_seed ^ SAMPLE_STREAM;
        let model = source.model.as_ref();
        let policy = TorchPolicy::on_device(model, &source.spec, source.base_seed, seed, device)?;
        Ok(TrainedPolicy {
            policy,
            spec: source.spec.clone(),
            filter,
            env_actions: EnvActions::new(
                &source.spec.action_space,
                normalize_actions,
                clip_actions,
            ),
            weights: Arc::new(Weights::default()),
        })
    }

    /// The observation space (after the run's framestack: with `model.framestack = k` an
    /// observation is the `k` latest frames, oldest first, as the env runners stack them).
    pub fn observation_space(&self) -> &Space {
        &self.spec.observation_space
    }

    /// The action space.
    pub fn action_space(&self) -> &Space {
        &self.spec.action_space
    }

    /// How many `f32` values the recurrent state of one episode takes (0 without one).
    pub fn state_dim(&self) -> usize {
        self.policy.state_dim()
    }

    /// The state an episode starts from (zeros, `state_dim()` values; RLlib's
    /// `get_initial_state()`, flattened).
    pub fn initial_state(&self) -> Vec<f32> {
        vec![0.0; self.state_dim()]
    }

    /// Acts on one observation with the recurrent `state` (empty, or `state_dim()` values):
    /// [`TrainedPolicy::compute_actions`] for a batch of one.
    pub fn compute_single_action(
        &mut self,
        obs: &[f32],
        state: &[f32],
        explore: bool,
    ) -> Result<PolicyOutput> {
        self.compute_actions(obs, state, explore)
    }

    /// Acts on a batch of observations (`[n, observation_space().flat_dim()]`, row-major) with
    /// their recurrent states (`[n, state_dim()]`; empty for initial states). Returns the
    /// actions (`[n, action_space().flat_dim()]`; an index per `Discrete` component, clipped
    /// `Box` values when the run clipped them), the next states, the action-distribution inputs
    /// (logits, or mean and log-std), the log-probabilities of the actions (of the actions
    /// before clipping, as training logs them) and the value predictions.
    pub fn compute_actions(
        &mut self,
        obs: &[f32],
        states: &[f32],
        explore: bool,
    ) -> Result<PolicyOutput> {
        let obs_dim = self.spec.observation_space.flat_dim();
        if obs.is_empty() || obs_dim == 0 || obs.len() % obs_dim != 0 {
            return Err(ImpalaError::PolicyInput {
                what: "observations".into(),
                problem: format!(
                    "hold {} values, not a whole number of observations of {obs_dim} ({})",
                    obs.len(),
                    self.spec.observation_space
                ),
                fix: format!("pass {obs_dim} values per observation, row after row"),
            });
        }
        let n = obs.len() / obs_dim;
        let state_dim = self.state_dim();
        let zeros;
        let states = if states.is_empty() {
            zeros = vec![0.0; n * state_dim];
            &zeros[..]
        } else if states.len() == n * state_dim {
            states
        } else {
            return Err(ImpalaError::PolicyInput {
                what: "state".into(),
                problem: format!(
                    "holds {} values; {n} observation(s) need {state_dim} each",
                    states.len()
                ),
                fix: "pass the state_out of the previous call, or initial_state() (zeros) for a \
                      new episode"
                    .into(),
            });
        };
        // A copy only to filter (a batch of images is large).
        let filtered;
        let obs = match &mut self.filter {
            Some(filter) => {
                let mut copy = obs.to_vec();
                filter.apply(&mut copy, false)?;
                filtered = copy;
                &filtered[..]
            }
            None => obs,
        };
        let mut out = PolicyOutput::default();
        let input = PolicyInput { obs, num_envs: n, state: states, explore };
        self.policy.compute_actions(&input, &mut out)?;
        self.env_actions.apply(&mut out.actions);
        Ok(out)
    }

    /// Writes the policy as a TorchScript module that plain PyTorch runs (`torch.jit.load`)
    /// without impala-rs (RLlib's `export_policy_model`): `forward(obs) -> (logits, value)`, or
    /// `forward(obs, state) -> (logits, value, state)` for recurrent models, with `obs` float32
    /// `[B, *observation_space().shape()]` as this policy takes them and the run's observation
    /// filter folded in. Actions are decoded from the logits as
    /// [`TorchPolicy::export_torchscript`] says; `Box` actions are not clipped by the module.
    pub fn export_torchscript(&self, path: &Path) -> Result<()> {
        let filter = self.filter.as_ref().map(|f| ExportFilter {
            mean: f.running_stats().mean().to_vec(),
            std: f.divisors(),
            clip: f.clip(),
        });
        Ok(self.policy.export_torchscript(path, filter.as_ref())?)
    }

    /// The model's weights, sorted by parameter name (RLlib's `policy.get_weights()`).
    pub fn get_weights(&self) -> Vec<NamedTensor> {
        self.weights.tensors.clone()
    }

    /// Replaces the model's weights (RLlib's `policy.set_weights()`): one tensor per parameter
    /// of the model, by name, in any order. A missing, unknown or misshapen parameter is an
    /// [`ImpalaError::PolicyInput`] naming it, and the policy keeps its weights.
    pub fn set_weights(&mut self, weights: Vec<NamedTensor>) -> Result<()> {
        let version = self.weights.version;
        self.load_weights(Arc::new(Weights::new(version, weights)))
    }

    /// The weights the model holds, as one snapshot (what the learner and runners take).
    pub(crate) fn snapshot(&self) -> &Arc<Weights> {
        &self.weights
    }

    /// Takes a live run's newer `weights` and observation `filter`.
    pub(crate) fn update(
        &mut self,
        weights: Arc<Weights>,
        filter: Option<MeanStdFilter>,
    ) -> Result<()> {
        self.load_weights(weights)?;
        self.filter = filter;
        Ok(())
    }

    fn load_weights(&mut self, weights: Arc<Weights>) -> Result<()> {
        let expected: Vec<(String, Vec<usize>)> = self
            .policy
            .model()
            .parameters()
            .into_iter()
            .map(|(name, t)| (name, t.size().iter().map(|&d| d as usize).collect()))
            .collect();
        check_weights(&expected, &weights.tensors)?;
        self.policy.set_weights(&weights)?;
        self.weights = weights;
        Ok(())
    }
}

/// Checks `given` against the model's parameters `expected` (name, shape), naming the first
/// parameter that is missing, unknown or of another shape.
fn check_weights(expected: &[(String, Vec<usize>)], given: &[NamedTensor]) -> Result<()> {
    let mismatch = |name: &str, problem: String, fix: String| ImpalaError::PolicyInput {
        what: format!("weight `{name}`"),
        problem,
        fix,
    };
    for (name, shape) in expected {
        let Some(w) = given.iter().find(|w| w.name == *name) else {
            return Err(mismatch(
                name,
                "is missing".into(),
                "give every parameter get_weights() lists".into(),
            ));
        };
        let numel: usize = w.shape.iter().product();
        if w.shape != *shape || w.data.len() != numel {
            return Err(mismatch(
                name,
                format!(
                    "has shape {:?} ({} values), the model's is {shape:?}",
                    w.shape,
                    w.data.len()
                ),
                "give it the shape get_weights() shows".into(),
            ));
        }
    }
    if let Some(w) = given.iter().find(|w| !expected.iter().any(|(name, _)| *name == w.name)) {
        let known: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
        return Err(mismatch(
            &w.name,
            "is no parameter of the model".into(),
            format!("the model's parameters are {}", known.join(", ")),
        ));
    }
    Ok(())
}
