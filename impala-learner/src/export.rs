//! A trained policy as a TorchScript module for use without impala-rs: observations in,
//! `(logits, value)` out, the observation filter folded in.
//!
//! libtorch's tracer (through tch) can only save a method with one tensor output, so the
//! network is traced as `network(obs[, state]) -> packed` (logits, value and state side by
//! side), and the archive gets a `forward` written in TorchScript that splits the packed
//! output into the tuple users expect. The written module is loaded back and checked against
//! the policy before it replaces `path`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use tch::{CModule, IValue, Kind, Tensor};
use zip::write::FileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use crate::error::torch_reason;
use crate::{LearnerError, Precision, Result, TorchPolicy};

/// An observation filter folded into an exported module: RLlib's `MeanStdFilter` at fixed
/// statistics, `clip((obs - mean) / std, -clip, clip)` in float64 as the filter computes it
/// (`std` includes the filter's `1e-8`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportFilter {
    /// Per observation value.
    pub mean: Vec<f64>,
    /// Per observation value, with the filter's epsilon added.
    pub std: Vec<f64>,
    /// The clip bound, if any.
    pub clip: Option<f64>,
}

/// The traced method's name. Seven letters, as `forward`, so the traced code keeps its length.
const PACKED_METHOD: &str = "network";

impl TorchPolicy {
    /// Writes the policy's network, at its current weights, as a TorchScript module that
    /// `torch.jit.load` runs without impala-rs:
    ///
    /// - `forward(obs) -> (logits, value)`: `obs` float32 `[B, *obs_shape]` as the env returns
    ///   it (images `[B, H, W, C]` with 0-255 values; Discrete observations `[B]` indices);
    ///   `logits` `[B, W]` are the action distribution's inputs (Discrete: `n` logits, take the
    ///   argmax or sample a softmax; MultiDiscrete: the components' logits one after another;
    ///   Box: the means then the log-stds), `value` `[B]`.
    /// - Recurrent policies: `forward(obs, state) -> (logits, value, state)` with `state`
    ///   float32 `[B, state_dim]`, zeros at the start of an episode.
    /// - `network(obs[, state])`: the same outputs side by side in one `[B, W + 1 (+ state_dim)]`
    ///   tensor.
    ///
    /// `filter` folds the run's observation filter in. The module is traced, so it holds the
    /// weights as constants on the policy's device: it is for inference, not training.
    ///
    /// ```
    /// use impala_core::{EnvSpec, Space};
    /// use impala_learner::{ModelSettings, TorchPolicy};
    ///
    /// let spec = EnvSpec {
    ///     id: "CartPole-v1".into(),
    ///     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
    ///     action_space: Space::Discrete(2),
    ///     max_episode_steps: Some(500),
    /// };
    /// let policy = TorchPolicy::new(&ModelSettings::default(), &spec, 0, 0)?;
    /// let path = tempfile::tempdir()?.keep().join("policy.pt");
    /// policy.export_torchscript(&path, None)?;
    ///
    /// // What `torch.jit.load` gives Python, here through tch.
    /// let module = tch::CModule::load(&path)?;
    /// let obs = tch::Tensor::zeros([3, 4], (tch::Kind::Float, tch::Device::Cpu));
    /// let tch::IValue::Tuple(out) = module.forward_is(&[tch::IValue::Tensor(obs)])? else {
    ///     panic!("forward returns (logits, value)")
    /// };
    /// assert_eq!(out.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_torchscript(&self, path: &Path, filter: Option<&ExportFilter>) -> Result<()> {
        let written = |reason: String| LearnerError::Export { path: path.to_path_buf(), reason };
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !folder.is_dir() {
            return Err(written(format!(
                "the folder {} does not exist; create it or write elsewhere",
                folder.display()
            )));
        }
        let net = &self.net;
        let device = self.device;
        let width = net.dist.inputs_dim() as i64;
        let state_dim = net.state_dim as i64;
        let mut shape = vec![2i64];
        shape.extend(net.obs_shape.iter().map(|&d| d as i64));
        let mut inputs = vec![Tensor::f_zeros(shape.as_slice(), (Kind::Float, device))?];
        if state_dim > 0 {
            inputs.push(Tensor::f_zeros([2, state_dim], (Kind::Float, device))?);
        }
        let filter = filter
            .map(|f| -> Result<_> {
                if f.mean.len() != net.obs_dim || f.std.len() != net.obs_dim {
                    return Err(written(format!(
                        "the observation filter has {} means and {} stds for {} observation \
                             values",
                        f.mean.len(),
                        f.std.len(),
                        net.obs_dim
                    )));
                }
                let mean = Tensor::f_from_slice(&f.mean)?.f_to_device(device)?;
                let std = Tensor::f_from_slice(&f.std)?.f_to_device(device)?;
                Ok((mean, std, f.clip))
            })
            .transpose()?;
        let packed = |inputs: &[Tensor]| -> Result<Tensor> {
            let mut x = inputs[0].f_reshape([-1, net.obs_dim as i64])?;
            if let Some((mean, std, clip)) = &filter {
                x = x.f_to_kind(Kind::Double)?.f_sub(mean)?.f_div(std)?;
                if let Some(c) = clip {
                    x = x.f_clamp(-c, *c)?;
                }
                x = x.f_to_kind(Kind::Float)?;
            }
            let unroll = inputs.get(1).map(|state| crate::Unroll {
                steps: 1,
                rows: 2,
                state,
                not_done: None,
            });
            // The module runs in float32 whatever precision the policy acts in.
            let out = net.forward_in(Precision::Fp32, &x, unroll)?;
            let mut parts = vec![out.dist_inputs, out.values.f_unsqueeze(1)?];
            parts.extend(out.state);
            Ok(Tensor::f_cat(&parts, 1)?)
        };
        let _guard = tch::no_grad_guard();
        let mut failure = None;
        let traced =
            CModule::create_by_tracing("ImpalaPolicy", "forward", &inputs, &mut |inputs| {
                match packed(inputs) {
                    Ok(out) => vec![out],
                    Err(e) => {
                        failure = Some(e);
                        Vec::new()
                    }
                }
            });
        if let Some(e) = failure {
            return Err(e);
        }
        let traced = traced
            .map_err(|e| written(format!("tracing the policy failed: {}", torch_reason(&e))))?;
        let temp = Temp(path.with_file_name(format!(
            ".{}.traced",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("policy.pt")
        )));
        traced
            .save(&temp.0)
            .map_err(|e| written(format!("writing failed: {}", torch_reason(&e))))?;
        let staged = Temp(temp.0.with_extension("staged"));
        add_tuple_forward(&temp.0, &staged.0, width, state_dim).map_err(written)?;
        let expected = packed(&inputs)?;
        check_written(&staged.0, &inputs, &expected, width, state_dim).map_err(written)?;
        std::fs::rename(&staged.0, path).map_err(|e| written(format!("writing failed: {e}")))?;
        Ok(())
    }
}

/// A file removed when dropped (the export's intermediate archives).
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Copies the traced archive `from` to `to` with its traced `forward` renamed
/// [`PACKED_METHOD`] and a `forward` that splits the packed output into
/// `(logits, value[, state])`.
fn add_tuple_forward(
    from: &Path,
    to: &Path,
    width: i64,
    state_dim: i64,
) -> std::result::Result<(), String> {
    let io = |what: &str, e: &dyn std::fmt::Display| format!("{what} the traced module: {e}");
    let mut archive = ZipArchive::new(File::open(from).map_err(|e| io("reading", &e))?)
        .map_err(|e| io("reading", &e))?;
    let mut out = ZipWriter::new(File::create(to).map_err(|e| io("writing", &e))?);
    let options = FileOptions::default().compression_method(CompressionMethod::Stored);
    let mut rewritten = false;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| io("reading", &e))?;
        let name = entry.name().to_owned();
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(|e| io("reading", &e))?;
        if name.ends_with("/code/__torch__.py.debug_pkl") {
            // Source ranges of the code rewritten below; the archive loads without them.
            continue;
        }
        if name.ends_with("/code/__torch__.py") {
            let code = String::from_utf8(bytes).map_err(|e| io("reading", &e))?;
            bytes = with_tuple_forward(&code, width, state_dim)?.into_bytes();
            rewritten = true;
        }
        // Tensor data 64-byte aligned, as libtorch writes it.
        out.start_file_aligned(name, options, 64).map_err(|e| io("writing", &e))?;
        out.write_all(&bytes).map_err(|e| io("writing", &e))?;
    }
    out.finish().map_err(|e| io("writing", &e))?;
    if rewritten {
        Ok(())
    } else {
        Err("the traced module has no code/__torch__.py to add the tuple forward to".into())
    }
}

/// The traced class's code with its `forward` renamed [`PACKED_METHOD`] and a tuple `forward`
/// in front of it.
fn with_tuple_forward(
    code: &str,
    width: i64,
    state_dim: i64,
) -> std::result::Result<String, String> {
    let header = "  def forward(self: ";
    let at = code.find(header).ok_or("the traced module's code has no forward method")?;
    let class_type: String =
        code[at + header.len()..].chars().take_while(|&c| c != ',' && c != ')').collect();
    let (params, args, ret, outputs) = if state_dim > 0 {
        (
            ",\n    obs: Tensor,\n    state: Tensor",
            "obs, state, ",
            "Tuple[Tensor, Tensor, Tensor]",
            format!(
                "(torch.narrow(out, 1, 0, {width}), torch.select(out, 1, {width}), \
                 torch.narrow(out, 1, {}, {state_dim}))",
                width + 1
            ),
        )
    } else {
        (
            ",\n    obs: Tensor",
            "obs, ",
            "Tuple[Tensor, Tensor]",
            format!("(torch.narrow(out, 1, 0, {width}), torch.select(out, 1, {width}))"),
        )
    };
    let forward = format!(
        "  def forward(self: {class_type}{params}) -> {ret}:\n    \
         out = (self).{PACKED_METHOD}({args})\n    return {outputs}\n"
    );
    let mut rewritten = String::with_capacity(code.len() + forward.len());
    rewritten.push_str(&code[..at]);
    rewritten.push_str(&forward);
    rewritten.push_str(&format!("  def {PACKED_METHOD}(self: "));
    rewritten.push_str(&code[at + header.len()..]);
    Ok(rewritten)
}

/// Loads the written module and checks that its `forward` gives the packed outputs split.
fn check_written(
    path: &Path,
    inputs: &[Tensor],
    expected: &Tensor,
    width: i64,
    state_dim: i64,
) -> std::result::Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("the written module does not load back: {e}");
    let module =
        CModule::load_on_device(path, expected.device()).map_err(|e| fail(&torch_reason(&e)))?;
    let args: Vec<IValue> = inputs.iter().map(|t| IValue::Tensor(t.shallow_clone())).collect();
    let out = module.forward_is(&args).map_err(|e| fail(&torch_reason(&e)))?;
    let IValue::Tuple(parts) = out else {
        return Err(fail(&"its forward does not return a tuple"));
    };
    let tensors: Vec<Tensor> = parts
        .into_iter()
        .map(|p| match p {
            IValue::Tensor(t) => Ok(t),
            other => Err(fail(&format!("its forward returned {other:?}"))),
        })
        .collect::<std::result::Result<_, _>>()?;
    let split = |t: &Tensor| -> std::result::Result<Vec<Tensor>, tch::TchError> {
        let mut parts = vec![t.f_narrow(1, 0, width)?, t.f_select(1, width)?];
        if state_dim > 0 {
            parts.push(t.f_narrow(1, width + 1, state_dim)?);
        }
        Ok(parts)
    };
    let wanted = split(expected).map_err(|e| fail(&e))?;
    let same = tensors.len() == wanted.len()
        && tensors.iter().zip(&wanted).all(|(a, b)| {
            a.size() == b.size() && a.f_allclose(b, 1e-6, 1e-6, false).unwrap_or(false)
        });
    if same {
        Ok(())
    } else {
        Err(fail(&"its outputs differ from the policy's"))
    }
}
