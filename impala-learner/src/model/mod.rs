//! The model seam: what the loss, the towers, the env runners' policy, weight broadcast and
//! checkpoints need of a network ([`Model`]), and what builds one ([`ModelFactory`]).
//!
//! RLlib's catalog (fully connected, conv, LSTM-wrapped; [`ModelSettings`]), the IMPALA
//! paper's deep ResNet ([`ImpalaResNet`]) and TorchScript modules ([`TorchScriptModel`]) are
//! implementations of it; a Rust user plugs any `tch` network the same way.

mod catalog;
mod init;
mod resnet;
mod torchscript;

use impala_core::{CustomModel, EnvSpec, Precision, Space};
use std::fmt::Debug;
use tch::{Device, Kind, Tensor};

use crate::{check_precision, ActionDistribution, Autocast, LearnerError, ModelSettings, Result};

pub use catalog::ActorCritic;
pub(crate) use init::Init;
pub use resnet::ImpalaResNet;
pub use torchscript::{TorchScriptModel, TORCHSCRIPT_VF_PREFIXES};

/// Bounds of a Gaussian policy's log standard deviation (std in [2e-9, 7.4]).
const LOG_STD_MIN: f64 = -20.0;
const LOG_STD_MAX: f64 = 2.0;

/// What a model returns for `N` observations.
#[derive(Debug)]
pub struct ModelOutput {
    /// The action distribution's inputs, `[N, W]` with RLlib's widths: Discrete `n` logits,
    /// MultiDiscrete the sum of its `nvec`, Box the mean then the log-std (`2 x dims`).
    pub dist_inputs: Tensor,
    /// Value predictions, `[N]`.
    pub values: Tensor,
    /// Recurrent models: the state after the last step, `[B, state_dim]`.
    pub state: Option<Tensor>,
}

/// Recurrent unrolling of `steps x rows` time-major observations (`N = steps * rows`).
#[derive(Debug, Clone, Copy)]
pub struct Unroll<'a> {
    /// T.
    pub steps: usize,
    /// B.
    pub rows: usize,
    /// The state before the first step, `[B, state_dim]`.
    pub state: &'a Tensor,
    /// `[T, B, 1]` floats, 0 after a step that ended an episode: the state after that step
    /// is reset to zeros (the initial state; runners start every episode from it too).
    pub not_done: Option<&'a Tensor>,
}

impl Unroll<'_> {
    /// Runs a one-step recurrent function over the unroll, time step by time step: `step`
    /// takes `[B, F]` features and the `[B, state_dim]` state and returns `[B, H]` outputs and
    /// the next state. Resets the state after steps that ended an episode and cuts the
    /// gradient every `max_seq_len` steps (truncated backpropagation through time, where RLlib
    /// cuts its sequences; the state values still carry over). Returns the `[T * B, H]`
    /// outputs and the final state.
    pub fn step_by_step(
        &self,
        feats: &Tensor,
        max_seq_len: usize,
        mut step: impl FnMut(&Tensor, &Tensor) -> Result<(Tensor, Tensor)>,
    ) -> Result<(Tensor, Tensor)> {
        if self.steps == 1 {
            // One step (runners, bootstraps, exported modules): no reshaping by the batch
            // size, so a traced step works for any batch.
            let (out, mut state) = step(feats, self.state)?;
            if let Some(nd) = self.not_done {
                state = state.f_mul(&nd.f_select(0, 0)?)?;
            }
            if max_seq_len <= 1 {
                state = state.f_detach()?;
            }
            return Ok((out, state));
        }
        let (t_len, b) = (self.steps as i64, self.rows as i64);
        let feats = feats.f_view([t_len, b, -1])?;
        let mut state = self.state.shallow_clone();
        let mut outs = Vec::with_capacity(self.steps);
        for t in 0..t_len {
            let (out, next) = step(&feats.f_select(0, t)?, &state)?;
            outs.push(out);
            state = next;
            if let Some(nd) = self.not_done {
                state = state.f_mul(&nd.f_select(0, t)?)?;
            }
            if (t + 1) as usize % max_seq_len.max(1) == 0 {
                state = state.f_detach()?;
            }
        }
        let out = Tensor::f_stack(&outs, 0)?;
        let width = out.size().last().copied().unwrap_or(0);
        Ok((out.f_view([t_len * b, width])?, state))
    }
}

/// A network the learner trains and env runners act with: an actor-critic over flat
/// observations.
///
/// Observations arrive as the batch holds them, `[N, obs_dim]` row-major: `f32` values, or
/// `u8` for [`Space::Bytes`] observations (0-255, in the env's `[H, W, C]` layout; runners
/// pass them as `f32` of the same values). [`observations`] reshapes them to the space's
/// layout. Implementations must be deterministic given their weights (runners and learner
/// compute the same log-probabilities) and hold their parameters on the device they were
/// built for.
///
/// ```
/// use impala_core::{EnvSpec, Space};
/// use impala_learner::{Model, ModelFactory, ModelOutput, Unroll};
/// use tch::{nn, nn::Module, Device, Tensor};
///
/// /// A linear policy and value function.
/// #[derive(Debug)]
/// struct Linear { vs: nn::VarStore, pi: nn::Linear, vf: nn::Linear }
///
/// impl Model for Linear {
///     fn forward(&self, obs: &Tensor, _: Option<Unroll<'_>>) -> impala_learner::Result<ModelOutput> {
///         Ok(ModelOutput { dist_inputs: self.pi.forward(obs), values: self.vf.forward(obs).squeeze_dim(1), state: None })
///     }
///     fn parameters(&self) -> Vec<(String, Tensor)> {
///         self.vs.variables().into_iter().collect()
///     }
///     fn is_value_parameter(&self, name: &str) -> bool {
///         name.starts_with("vf.")
///     }
/// }
///
/// #[derive(Debug)]
/// struct LinearFactory;
///
/// impl ModelFactory for LinearFactory {
///     fn build(&self, spec: &EnvSpec, device: Device, _seed: u64) -> impala_learner::Result<Box<dyn Model>> {
///         let vs = nn::VarStore::new(device);
///         let (obs, acts) = (spec.observation_space.flat_dim() as i64, 2);
///         let pi = nn::linear(vs.root() / "pi", obs, acts, Default::default());
///         let vf = nn::linear(vs.root() / "vf", obs, 1, Default::default());
///         Ok(Box::new(Linear { vs, pi, vf }))
///     }
/// }
///
/// let spec = EnvSpec {
///     id: "Toy".into(),
///     observation_space: Space::continuous(vec![-1.0; 4], vec![1.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let settings = impala_learner::LearnerSettings::default();
/// let learner = impala_learner::Learner::with_model(&settings, &LinearFactory, &spec, &[Device::Cpu])?;
/// assert_eq!(learner.num_parameters(), 4 * 2 + 2 + 4 + 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Model: Send + Debug {
    /// The forward pass over `N` observations. Feed-forward models get `unroll = None` (or
    /// may ignore it); recurrent models ([`Model::state_dim`] > 0) always get one, and return
    /// the state after the last step in [`ModelOutput::state`].
    fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput>;

    /// The trainable parameters with names unique in the model (weight broadcast and
    /// checkpoints key them by name; their order does not matter).
    fn parameters(&self) -> Vec<(String, Tensor)>;

    /// Recurrent state per env, as one flat `f32` row (0 for feed-forward models). Every
    /// episode starts from zeros.
    fn state_dim(&self) -> usize {
        0
    }

    /// Whether parameter `name` belongs to the value function only: what
    /// `_separate_vf_optimizer` trains with `_lr_vf` on the value loss alone.
    fn is_value_parameter(&self, name: &str) -> bool;

    /// What the model is, for errors ("the TorchScript module model.pt").
    fn name(&self) -> String {
        "the model".into()
    }
}

/// Builds a [`Model`]: once per learner tower (on its device) and once per env runner (on
/// the CPU). Every call with the same `seed` must give the same initial weights, so runners
/// act with the learner's weights before the first broadcast.
pub trait ModelFactory: Send + Sync + Debug {
    /// A model for `spec`'s spaces on `device`, its initial weights from `seed`.
    fn build(&self, spec: &EnvSpec, device: Device, seed: u64) -> Result<Box<dyn Model>>;
}

impl ModelFactory for ModelSettings {
    /// The catalog model, or the custom model that `custom_model` names.
    fn build(&self, spec: &EnvSpec, device: Device, seed: u64) -> Result<Box<dyn Model>> {
        Ok(match &self.custom_model {
            None => Box::new(ActorCritic::build(self, spec, device, seed)?),
            Some(CustomModel::ImpalaResNet(resnet)) => {
                Box::new(ImpalaResNet::build(resnet, self, spec, device, seed)?)
            }
            Some(CustomModel::TorchScript(path)) => {
                Box::new(TorchScriptModel::load(path, self, spec, device)?)
            }
        })
    }
}

/// `obs` (`[N, obs_dim]`, floats or bytes) as `f32` in the observation space's layout:
/// `[N, *shape]` for `Box` and `Bytes` (bytes keep their 0-255 values), one-hot
/// `[N, sum(n)]` for `Discrete` and `MultiDiscrete` (RLlib's preprocessor).
pub fn observations(obs: &Tensor, space: &Space) -> Result<Tensor> {
    Ok(match space {
        Space::Discrete(n) => one_hot(obs, &[*n])?,
        Space::MultiDiscrete(nvec) => one_hot(obs, nvec)?,
        Space::Box { shape, .. } | Space::Bytes { shape } => {
            // Float observations of a flat space are already what the model reads: they pass
            // without a conversion or a view, each a libtorch dispatch, which a runner's
            // forward pass of a small MLP pays for every step.
            let x = match obs.kind() {
                Kind::Float => obs.shallow_clone(),
                _ => obs.f_to_kind(Kind::Float)?,
            };
            if shape.len() == 1 {
                return Ok(x);
            }
            let mut dims = vec![-1i64];
            dims.extend(shape.iter().map(|&d| d as i64));
            x.f_view(dims.as_slice())?
        }
    })
}

fn one_hot(obs: &Tensor, nvec: &[usize]) -> Result<Tensor> {
    let parts = nvec
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let index = obs.f_narrow(1, i as i64, 1)?.f_squeeze_dim(1)?.f_to_kind(Kind::Int64)?;
            Ok(index.f_one_hot(n as i64)?.f_to_kind(Kind::Float)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Tensor::f_cat(&parts, 1)?)
}

/// A built model with what the loss and the runners need around it: the action
/// distribution, the observation size, and the contract checked once at build time.
#[derive(Debug)]
pub(crate) struct Network {
    pub model: Box<dyn Model>,
    pub dist: ActionDistribution,
    pub obs_dim: usize,
    /// One observation's shape in the env's layout (`[]` for Discrete).
    pub obs_shape: Vec<usize>,
    pub state_dim: usize,
    /// The parameters sorted by name (weights and checkpoints are in this order).
    pub params: Vec<(String, Tensor)>,
    /// bf16-mixed runs [`Network::forward`] under autocast.
    pub precision: Precision,
}

impl Network {
    /// Builds the model and checks it on a dummy batch: a model that breaks the contract is
    /// refused here, with what was expected and what came back, never mid-run.
    pub fn build(
        factory: &dyn ModelFactory,
        spec: &EnvSpec,
        device: Device,
        seed: u64,
    ) -> Result<Self> {
        let dist = ActionDistribution::for_space(&spec.action_space)?;
        let model = factory.build(spec, device, seed)?;
        let mut params = model.parameters();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = params.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(LearnerError::Model {
                reason: format!("{}: two parameters are named `{}`", model.name(), w[0].0),
            });
        }
        if params.is_empty() {
            return Err(LearnerError::Model {
                reason: format!("{} has no trainable parameters", model.name()),
            });
        }
        let network = Network {
            obs_dim: spec.observation_space.flat_dim(),
            obs_shape: spec.observation_space.shape(),
            state_dim: model.state_dim(),
            model,
            dist,
            params,
            precision: Precision::Fp32,
        };
        network.check(device)?;
        Ok(network)
    }

    /// Runs the forward pass in `precision` from now on, once `device` is checked for it.
    pub fn set_precision(&mut self, precision: Precision, device: Device) -> Result<()> {
        check_precision(precision, device)?;
        self.precision = precision;
        Ok(())
    }

    /// The forward pass with the contract's shapes checked and a Gaussian's log-std bounded;
    /// in bf16-mixed the model runs under autocast and its outputs come back as float32, so
    /// the distribution, the loss and V-trace never see bfloat16.
    pub fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput> {
        self.forward_in(self.precision, obs, unroll)
    }

    /// [`Network::forward`] in `precision` instead of the network's own.
    pub fn forward_in(
        &self,
        precision: Precision,
        obs: &Tensor,
        unroll: Option<Unroll<'_>>,
    ) -> Result<ModelOutput> {
        let n = obs.size().first().copied().unwrap_or(0);
        let rows = unroll.map(|u| u.rows as i64);
        let mut out = match precision {
            Precision::Fp32 => self.model.forward(obs, unroll)?,
            Precision::Bf16Mixed => {
                let autocast = Autocast::bf16(obs.device())?;
                let mut out = self.model.forward(obs, unroll)?;
                drop(autocast);
                let float = |t: &Tensor| match t.kind() {
                    Kind::Float => Ok(t.shallow_clone()),
                    _ => t.f_to_kind(Kind::Float),
                };
                out.dist_inputs = float(&out.dist_inputs)?;
                out.values = float(&out.values)?;
                out.state = out.state.as_ref().map(float).transpose()?;
                out
            }
        };
        let width = self.dist.inputs_dim() as i64;
        let expect = |what: &str, expected: String, got: &Tensor| LearnerError::Model {
            reason: format!(
                "{}: its {what} should be {expected}, the forward pass returned {:?}",
                self.model.name(),
                got.size()
            ),
        };
        if out.dist_inputs.size() != [n, width] {
            return Err(expect(
                "action-distribution inputs (logits)",
                format!("[{n}, {width}] ({})", self.dist.describe_inputs()),
                &out.dist_inputs,
            ));
        }
        if out.values.size() == [n, 1] {
            out.values = out.values.f_squeeze_dim(1)?;
        } else if out.values.size() != [n] {
            return Err(expect("values", format!("[{n}] or [{n}, 1]"), &out.values));
        }
        match (&out.state, rows) {
            (Some(s), Some(b)) if self.state_dim > 0 && s.size() != [b, self.state_dim as i64] => {
                return Err(expect("recurrent state", format!("[{b}, {}]", self.state_dim), s));
            }
            (None, _) if self.state_dim > 0 => {
                return Err(LearnerError::Model {
                    reason: format!(
                        "{} has a recurrent state of {} values but returned none",
                        self.model.name(),
                        self.state_dim
                    ),
                })
            }
            _ => {}
        }
        if let ActionDistribution::DiagGaussian(d) = self.dist {
            // A collapsing std (log_std -> -inf) makes the behaviour actions' log-probs -inf
            // and the V-trace log-rhos non-finite; bound it as SAC-style Gaussian heads do.
            let d = d as i64;
            let mean = out.dist_inputs.f_narrow(1, 0, d)?;
            let log_std = out.dist_inputs.f_narrow(1, d, d)?.f_clamp(LOG_STD_MIN, LOG_STD_MAX)?;
            out.dist_inputs = Tensor::f_cat(&[mean, log_std], 1)?;
        }
        Ok(out)
    }

    /// One forward pass over two observations (a two-step unroll for recurrent models):
    /// shapes as the contract says, finite outputs.
    fn check(&self, device: Device) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let obs = Tensor::f_zeros([2, self.obs_dim as i64], (Kind::Float, device))?;
        let state = Tensor::f_zeros([1, self.state_dim as i64], (Kind::Float, device))?;
        let unroll = (self.state_dim > 0).then_some(Unroll {
            steps: 2,
            rows: 1,
            state: &state,
            not_done: None,
        });
        let out = self.forward(&obs, unroll)?;
        let mut outputs =
            vec![("action-distribution inputs", &out.dist_inputs), ("values", &out.values)];
        if let Some(s) = &out.state {
            outputs.push(("recurrent state", s));
        }
        for (what, t) in outputs {
            if !bool::try_from(t.f_isfinite()?.f_all()?)? {
                return Err(LearnerError::Model {
                    reason: format!(
                        "{}: its {what} hold NaN or inf on an all-zero observation",
                        self.model.name()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Whether parameter `name` is trained by the value optimizer.
    pub fn is_value_parameter(&self, name: &str) -> bool {
        self.model.is_value_parameter(name)
    }
}
