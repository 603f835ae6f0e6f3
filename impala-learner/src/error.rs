//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the learner, the policy or their threads. libtorch's and
/// V-trace's errors are part of the message (which crosses threads as text), not a `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LearnerError {
    /// libtorch reported an error (shape, device, out of memory, ...).
    #[error("libtorch: {0}")]
    Torch(tch::TchError),
    /// A batch or spec from impala-core was inconsistent.
    #[error(transparent)]
    Core(#[from] impala_core::CoreError),
    /// V-trace rejected its inputs (non-finite values, shapes).
    #[error("v-trace: {0}")]
    VTrace(impala_vtrace::VTraceError),
    /// The config asks for something this learner cannot build.
    #[error("invalid learner config: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// The `precision` asked for cannot run here (bf16-mixed on a CPU or GPU without fast
    /// bfloat16), or libtorch refused to switch autocast.
    #[error("{reason}")]
    Precision {
        /// Why, and what to set instead.
        reason: String,
    },
    /// A model breaks the model contract (output shapes, non-finite outputs, a file that is
    /// not TorchScript, a forward pass that raises).
    #[error("model: {reason}")]
    Model {
        /// What was expected and what came back.
        reason: String,
    },
    /// A batch does not fit the model (wrong observation size, too few rows for the towers, ...).
    #[error("batch does not fit the model: {reason}")]
    Batch {
        /// What does not fit.
        reason: String,
    },
    /// The loss or the gradient norm was NaN or infinite; the optimizer step was skipped, so
    /// the weights are still the last good ones.
    #[error(
        "non-finite loss: total_loss={total_loss}, policy_loss={policy_loss}, \
         vf_loss={vf_loss}, entropy={entropy}, grad_gnorm={grad_gnorm}"
    )]
    NonFiniteLoss {
        /// Total loss.
        total_loss: f64,
        /// Policy-gradient loss.
        policy_loss: f64,
        /// Value-function loss.
        vf_loss: f64,
        /// Mean entropy.
        entropy: f64,
        /// Gradient global norm before clipping.
        grad_gnorm: f64,
    },
    /// An optimizer step made a weight or an optimizer state non-finite (e.g. a huge learning
    /// rate without `grad_clip`); the step was undone, so the weights are still the last good
    /// ones.
    #[error(
        "non-finite weights: the optimizer step made `{tensor}` NaN or infinite; the step was \
         undone, the weights are the last good ones (lower lr, or set grad_clip)"
    )]
    NonFiniteWeights {
        /// The first parameter or optimizer-state tensor (by name) that became non-finite.
        tensor: String,
    },
    /// A checkpoint could not be written or does not match this model.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A policy could not be exported (`TorchPolicy::export_torchscript`).
    #[error("cannot export the policy to {path}: {reason}")]
    Export {
        /// The file to write.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The learner plan (`num_gpus`, or `num_learners` x `num_gpus_per_learner`) asks for more
    /// CUDA devices than libtorch sees.
    #[error(
        "the learner asks for {requested} CUDA device(s) but libtorch sees {available} (is \
         libtorch_cuda.so linked with --no-as-needed? set _fake_gpus to run the towers on the CPU)"
    )]
    NoCuda {
        /// Devices asked for.
        requested: usize,
        /// Devices libtorch sees.
        available: i64,
    },
    /// The learner thread or a loader thread stopped unexpectedly (panic or failure).
    #[error("the learner thread died: {reason}")]
    ThreadDied {
        /// Why, as far as it is known.
        reason: String,
    },
}

/// The crate's result alias.
pub type Result<T, E = LearnerError> = std::result::Result<T, E>;

impl From<tch::TchError> for LearnerError {
    fn from(e: tch::TchError) -> Self {
        LearnerError::Torch(e)
    }
}

impl From<impala_vtrace::VTraceError> for LearnerError {
    fn from(e: impala_vtrace::VTraceError) -> Self {
        LearnerError::VTrace(e)
    }
}

impl From<LearnerError> for impala_core::CoreError {
    fn from(e: LearnerError) -> Self {
        impala_core::CoreError::Policy { reason: e.to_string() }
    }
}

/// libtorch's message of `e` without the C++ backtrace it appends.
pub(crate) fn torch_reason(e: &tch::TchError) -> String {
    let text = e.to_string();
    let text = text.split("Exception raised from").next().unwrap_or_default();
    text.trim().trim_start_matches("Internal torch error:").trim().trim_end_matches(';').to_owned()
}
