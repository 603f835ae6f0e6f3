//! A TorchScript module as the model (`model.custom_model = "path/to/model.pt"`): trained by
//! the learner through libtorch's JIT and run by every env runner.
//!
//! The contract, checked when the model is built:
//!
//! - `forward(obs) -> (logits, value)`: `obs` a float32 `[B, *obs_shape]` tensor in the env's
//!   own layout and scale (byte images arrive as 0-255 values, `[B, H, W, C]`, as RLlib's
//!   custom models get them; `Discrete` and `MultiDiscrete` observations one-hot, `[B, sum(n)]`);
//!   `logits` `[B, num_outputs]` with RLlib's widths (Discrete `n`, MultiDiscrete the sum of
//!   `nvec`, Box the mean then the log-std, `2 x dims`); `value` `[B]` or `[B, 1]`.
//! - Recurrent modules: `forward(obs, state: List[Tensor]) -> (logits, value, state)` and
//!   `get_initial_state() -> List[Tensor]` (each tensor without the batch dimension, as
//!   RLlib's `get_initial_state`; `state` in and out is batched, `[B, *shape]`). Episodes
//!   start from the initial state. The learner unrolls the module step by step and cuts the
//!   gradient every `model.max_seq_len` steps.
//! - The value function's parameters (what `_separate_vf_optimizer` trains with `_lr_vf`) are
//!   those whose names start with one of the strings a `value_function_prefixes() ->
//!   List[str]` method returns, or, without that method, with one of
//!   [`TORCHSCRIPT_VF_PREFIXES`].
//!
//! PyTorch marks TorchScript as deprecated in favour of `torch.export`, whose programs cannot
//! yet be trained from C++ (libtorch runs exported programs through AOTInductor, inference
//! only). When they can, an exported program with the same `forward` contract would replace
//! the file loaded here; nothing else changes.

use std::path::Path;

use impala_core::{EnvSpec, Space};
use tch::{CModule, Device, IValue, Kind, Tensor};

use super::{observations, Model, ModelOutput, Unroll};
use crate::{LearnerError, ModelSettings, Result};

/// The parameter-name prefixes of a module's value function when it has no
/// `value_function_prefixes()` method (RLlib's custom models name it `_value_branch`).
pub const TORCHSCRIPT_VF_PREFIXES: [&str; 3] = ["value", "vf", "_value"];

/// A recurrent module's state layout.
#[derive(Debug)]
struct Recurrent {
    /// The shape of each state tensor, without the batch dimension.
    shapes: Vec<Vec<i64>>,
    /// `get_initial_state()` flattened, `[1, state_dim]`. The flat state that runners and
    /// batches carry is the module's state minus this, so zeros are the initial state.
    initial: Tensor,
    max_seq_len: usize,
}

/// A TorchScript module trained in place: its parameters are the module's own tensors.
#[derive(Debug)]
pub struct TorchScriptModel {
    /// The file, for errors.
    path: std::path::PathBuf,
    module: CModule,
    params: Vec<(String, Tensor)>,
    space: Space,
    recurrent: Option<Recurrent>,
    vf_prefixes: Vec<String>,
}

/// The error of a module that breaks the contract.
fn broken(path: &Path, reason: impl std::fmt::Display) -> LearnerError {
    LearnerError::Model { reason: format!("TorchScript module {}: {reason}", path.display()) }
}

/// libtorch's message when a module has no such method.
fn is_missing_method(e: &tch::TchError) -> bool {
    let text = e.to_string();
    text.contains("not defined") || text.contains("does not have a method")
}

impl TorchScriptModel {
    /// Loads the module at `path` onto `device` (`model.max_seq_len` bounds a recurrent
    /// module's gradient through time).
    pub fn load(
        path: &Path,
        model: &ModelSettings,
        spec: &EnvSpec,
        device: Device,
    ) -> Result<Self> {
        let module = CModule::load_on_device(path, device).map_err(|e| {
            broken(
                path,
                format!(
                    "cannot be loaded as TorchScript ({e}); save one with \
                     `torch.jit.script(module).save(path)`"
                ),
            )
        })?;
        let params = module
            .named_parameters()
            .map_err(|e| broken(path, e))?
            .into_iter()
            .map(|(name, t)| (name, t.set_requires_grad(true)))
            .collect();
        let recurrent = match module.method_is::<IValue>("get_initial_state", &[]) {
            Ok(state) => Some(Recurrent::new(path, state, device, model.max_seq_len.get())?),
            Err(e) if is_missing_method(&e) => None,
            Err(e) => return Err(broken(path, format!("get_initial_state() raised: {e}"))),
        };
        let vf_prefixes = match module.method_is::<IValue>("value_function_prefixes", &[]) {
            Ok(IValue::StringList(prefixes)) => prefixes,
            Ok(IValue::GenericList(items)) => items
                .into_iter()
                .map(|v| match v {
                    IValue::String(s) => Ok(s),
                    other => Err(broken(
                        path,
                        format!("value_function_prefixes() should return List[str], got {other:?}"),
                    )),
                })
                .collect::<Result<_>>()?,
            Ok(other) => {
                return Err(broken(
                    path,
                    format!("value_function_prefixes() should return List[str], got {other:?}"),
                ))
            }
            Err(e) if is_missing_method(&e) => {
                TORCHSCRIPT_VF_PREFIXES.iter().map(|p| p.to_string()).collect()
            }
            Err(e) => return Err(broken(path, format!("value_function_prefixes() raised: {e}"))),
        };
        Ok(TorchScriptModel {
            path: path.to_path_buf(),
            module,
            params,
            space: spec.observation_space.clone(),
            recurrent,
            vf_prefixes,
        })
    }

    /// Calls `forward` on `inputs`, expecting `outputs` tensors or tensor lists back.
    fn call(&self, inputs: &[IValue], expect: &str) -> Result<Vec<IValue>> {
        let out = self.module.forward_is(inputs).map_err(|e| LearnerError::Model {
            reason: format!("{}: forward raised: {e}", self.name()),
        })?;
        let n = if self.recurrent.is_some() { 3 } else { 2 };
        match out {
            IValue::Tuple(items) if items.len() == n => Ok(items),
            other => Err(LearnerError::Model {
                reason: format!(
                    "{}: forward should return {expect}, returned {}",
                    self.name(),
                    describe(&other)
                ),
            }),
        }
    }
}

/// An [`IValue`]'s kind and sizes, for errors.
fn describe(value: &IValue) -> String {
    match value {
        IValue::Tensor(t) => format!("a tensor of shape {:?}", t.size()),
        IValue::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(describe).collect();
            format!("a tuple of {} ({})", items.len(), parts.join(", "))
        }
        IValue::TensorList(ts) => format!("a list of {} tensors", ts.len()),
        other => format!("{other:?}"),
    }
}

fn tensor(value: IValue, what: &str) -> Result<Tensor> {
    match value {
        IValue::Tensor(t) => Ok(t),
        other => Err(LearnerError::Model {
            reason: format!(
                "the TorchScript module's {what} should be a tensor, got {}",
                describe(&other)
            ),
        }),
    }
}

fn tensor_list(value: IValue, what: &str) -> Result<Vec<Tensor>> {
    match value {
        IValue::TensorList(ts) => Ok(ts),
        IValue::GenericList(items) => items.into_iter().map(|v| tensor(v, what)).collect(),
        other => Err(LearnerError::Model {
            reason: format!(
                "the TorchScript module's {what} should be a List[Tensor], got {}",
                describe(&other)
            ),
        }),
    }
}

impl Recurrent {
    fn new(path: &Path, state: IValue, device: Device, max_seq_len: usize) -> Result<Self> {
        let tensors = tensor_list(state, "get_initial_state()").map_err(|e| broken(path, e))?;
        if tensors.is_empty() {
            return Err(broken(path, "get_initial_state() returned an empty list"));
        }
        let shapes: Vec<Vec<i64>> = tensors.iter().map(|t| t.size()).collect();
        let flat = tensors
            .iter()
            .map(|t| Ok(t.f_to_kind(Kind::Float)?.f_to_device(device)?.f_reshape([1, -1])?))
            .collect::<Result<Vec<_>>>()?;
        let initial = Tensor::f_cat(&flat, 1)?.f_detach()?;
        Ok(Recurrent { shapes, initial, max_seq_len })
    }

    fn state_dim(&self) -> usize {
        self.initial.size()[1] as usize
    }

    /// The flat `[B, state_dim]` state as the module's list of `[B, *shape]` tensors.
    fn unflatten(&self, flat: &Tensor) -> Result<Vec<Tensor>> {
        let state = flat.f_add(&self.initial)?;
        let mut offset = 0;
        self.shapes
            .iter()
            .map(|shape| {
                let n: i64 = shape.iter().product();
                let mut dims = vec![-1];
                dims.extend(shape);
                let t = state.f_narrow(1, offset, n)?.f_reshape(dims.as_slice())?;
                offset += n;
                Ok(t)
            })
            .collect()
    }

    /// The module's state list as the flat `[B, state_dim]` state.
    fn flatten(&self, state: Vec<Tensor>, b: i64) -> Result<Tensor> {
        if state.len() != self.shapes.len() {
            return Err(LearnerError::Model {
                reason: format!(
                    "the TorchScript module's forward returned {} state tensors, \
                     get_initial_state() has {}",
                    state.len(),
                    self.shapes.len()
                ),
            });
        }
        let flat = state
            .iter()
            .zip(&self.shapes)
            .map(|(t, shape)| {
                let n: i64 = shape.iter().product();
                if t.numel() as i64 != b * n {
                    return Err(LearnerError::Model {
                        reason: format!(
                            "the TorchScript module's forward returned a state of shape {:?}, \
                             expected [{b}, {}]",
                            t.size(),
                            shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                        ),
                    });
                }
                Ok(t.f_reshape([-1, n])?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_cat(&flat, 1)?.f_sub(&self.initial)?)
    }
}

impl Model for TorchScriptModel {
    fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput> {
        let x = observations(obs, &self.space)?;
        let (Some(recurrent), Some(u)) = (&self.recurrent, unroll) else {
            if self.recurrent.is_some() {
                return Err(LearnerError::Batch {
                    reason: "a recurrent module needs its recurrent state".into(),
                });
            }
            let mut out = self.call(&[IValue::Tensor(x)], "(logits, value)")?.into_iter();
            let (logits, value) = (out.next(), out.next());
            return Ok(ModelOutput {
                dist_inputs: tensor(logits.unwrap_or(IValue::None), "logits")?,
                values: tensor(value.unwrap_or(IValue::None), "value")?,
                state: None,
            });
        };
        let b = u.rows as i64;
        // Each step's rows in the observation's layout (batch size left free for traced
        // exports), and each step's logits and value side by side, so one unroll carries both.
        let mut row_shape = vec![-1];
        row_shape.extend(&x.size()[1..]);
        let mut width = None;
        let (packed, state) =
            u.step_by_step(&x.f_flatten(1, -1)?, recurrent.max_seq_len, |x_t, s| {
                let inputs = [
                    IValue::Tensor(x_t.f_view(row_shape.as_slice())?),
                    IValue::TensorList(recurrent.unflatten(s)?),
                ];
                let mut out = self.call(&inputs, "(logits, value, state)")?.into_iter();
                let logits = tensor(out.next().unwrap_or(IValue::None), "logits")?;
                let value = tensor(out.next().unwrap_or(IValue::None), "value")?;
                let state = tensor_list(out.next().unwrap_or(IValue::None), "state")?;
                if value.numel() as i64 != b || logits.dim() != 2 {
                    return Err(LearnerError::Model {
                        reason: format!(
                        "{}: forward should return logits [{b}, num_outputs] and a value [{b}] or \
                         [{b}, 1], returned {:?} and {:?}",
                        self.name(),
                        logits.size(),
                        value.size()
                    ),
                    });
                }
                width = Some(logits.size()[1]);
                Ok((
                    Tensor::f_cat(&[logits, value.f_reshape([-1, 1])?], 1)?,
                    recurrent.flatten(state, b)?,
                ))
            })?;
        let w = width.unwrap_or(0);
        Ok(ModelOutput {
            dist_inputs: packed.f_narrow(1, 0, w)?,
            values: packed.f_narrow(1, w, packed.size()[1] - w)?,
            state: Some(state),
        })
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.params.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect()
    }

    fn state_dim(&self) -> usize {
        self.recurrent.as_ref().map_or(0, Recurrent::state_dim)
    }

    fn is_value_parameter(&self, name: &str) -> bool {
        self.vf_prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    fn name(&self) -> String {
        format!("TorchScript module {} (model.custom_model)", self.path.display())
    }
}
