//! Mixed precision (`precision = "bf16-mixed"`): libtorch's autocast around the models'
//! forward passes, so convolutions and matrix products run in bfloat16 while the weights, the
//! optimizer state, the loss and V-trace stay float32. tch 0.24 binds autocast for CUDA only;
//! `csrc/autocast.cpp` turns it on for the CPU as well. Also where the threads that run models
//! flush denormal floats to zero ([`flush_denormals`]).
#![allow(unsafe_code, reason = "calls into the C++ autocast shim built by build.rs")]

use std::cell::Cell;
use std::ffi::c_int;
use std::marker::PhantomData;

use impala_core::Precision;
use tch::Device;

use crate::{LearnerError, Result};

mod ffi {
    use std::ffi::c_int;

    extern "C" {
        pub fn impala_autocast_bf16_enter(
            cuda: bool,
            was_enabled: *mut bool,
            was_dtype: *mut c_int,
        ) -> c_int;
        pub fn impala_autocast_exit(cuda: bool, was_enabled: bool, was_dtype: c_int) -> c_int;
        pub fn impala_autocast_is_enabled(cuda: bool) -> bool;
        pub fn impala_cuda_bf16_supported() -> bool;
        pub fn impala_set_flush_denormal(on: bool) -> bool;
    }
}

/// bfloat16 autocast on the current thread for one device type while the guard lives (libtorch
/// keeps autocast state per thread, so the guard is neither `Send` nor `Sync`). Dropping it
/// restores what was there and, at the outermost guard, frees the bfloat16 copies of the
/// weights autocast cached, as leaving `torch.autocast` does.
///
/// ```
/// use impala_learner::Autocast;
/// use tch::{Device, Kind, Tensor};
///
/// let a = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
/// let b = Tensor::ones([3, 2], (Kind::Float, Device::Cpu));
/// {
///     let _bf16 = Autocast::bf16(Device::Cpu)?;
///     assert_eq!(a.matmul(&b).kind(), Kind::BFloat16);
/// }
/// assert_eq!(a.matmul(&b).kind(), Kind::Float);
/// assert!(!Autocast::is_enabled(Device::Cpu));
/// # Ok::<(), impala_learner::LearnerError>(())
/// ```
#[derive(Debug)]
#[must_use = "autocast is on only while the guard lives"]
pub struct Autocast {
    cuda: bool,
    was_enabled: bool,
    was_dtype: c_int,
    _per_thread: PhantomData<*const ()>,
}

impl Autocast {
    /// Turns bfloat16 autocast on for `device`'s type (the CPU, or CUDA) on this thread.
    pub fn bf16(device: Device) -> Result<Autocast> {
        let cuda = is_cuda(device)?;
        let (mut was_enabled, mut was_dtype) = (false, 0);
        // SAFETY: the shim only reads and writes libtorch's thread-local autocast state and
        // writes the two out-parameters, which point at live locals.
        let failed =
            unsafe { ffi::impala_autocast_bf16_enter(cuda, &mut was_enabled, &mut was_dtype) };
        if failed != 0 {
            return Err(LearnerError::Precision {
                reason: "libtorch refused to turn bfloat16 autocast on".into(),
            });
        }
        Ok(Autocast { cuda, was_enabled, was_dtype, _per_thread: PhantomData })
    }

    /// Whether autocast is on for `device`'s type on this thread.
    pub fn is_enabled(device: Device) -> bool {
        // SAFETY: reads libtorch's thread-local autocast state.
        is_cuda(device).is_ok_and(|cuda| unsafe { ffi::impala_autocast_is_enabled(cuda) })
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // SAFETY: restores libtorch's thread-local autocast state saved by `bf16` on this
        // thread (the guard cannot leave it). A failure leaves autocast as it was, nothing to
        // undo.
        unsafe { ffi::impala_autocast_exit(self.cuda, self.was_enabled, self.was_dtype) };
    }
}

fn is_cuda(device: Device) -> Result<bool> {
    match device {
        Device::Cpu => Ok(false),
        Device::Cuda(_) => Ok(true),
        other => Err(LearnerError::Precision {
            reason: format!("autocast runs on the CPU and CUDA, not on {other:?}"),
        }),
    }
}

/// Flushes denormal floats to zero on the calling thread, as `torch.set_flush_denormal(True)`
/// does (x86's FTZ and DAZ); whether this CPU can. Every thread that trains or runs a model
/// calls it once. Values below 1.2e-38 become 0, which no loss, weight or statistic here
/// depends on, and Intel CPUs no longer take their slow microcode path on them: Adam's slots
/// of weights whose gradients stay 0 decay through the denormal range, and on a 2-core Xeon
/// that made the fast Pong config's optimizer step about 3x as slow (docs/PERFORMANCE.md).
pub(crate) fn flush_denormals() -> bool {
    // SAFETY: sets the calling thread's floating-point control register through libtorch.
    unsafe { ffi::impala_set_flush_denormal(true) }
}

thread_local! {
    /// Whether this thread has flushed denormals already.
    static FLUSHED: Cell<bool> = const { Cell::new(false) };
}

/// [`flush_denormals`] the first time the calling thread trains or runs a model: every
/// caller of [`Learner::update`](crate::Learner::update) or a [`TorchPolicy`](crate::TorchPolicy)
/// gets it, not only the threads this crate spawns.
pub(crate) fn flush_denormals_once() {
    FLUSHED.with(|done| {
        if !done.get() {
            flush_denormals();
            done.set(true);
        }
    });
}

/// Checks that `device` can run `precision` fast, so a run that cannot is refused at start-up
/// with the reason instead of crawling through emulated bfloat16.
///
/// ```
/// use impala_core::Precision;
/// impala_learner::check_precision(Precision::Fp32, tch::Device::Cpu)?;
/// # Ok::<(), impala_learner::LearnerError>(())
/// ```
pub fn check_precision(precision: Precision, device: Device) -> Result<()> {
    if precision == Precision::Fp32 {
        return Ok(());
    }
    let refusal = match device {
        Device::Cpu => cpu_bf16_refusal(cpu_has_bf16()),
        // SAFETY: asks libtorch's CUDA hooks about the current device; false without CUDA.
        Device::Cuda(_) if unsafe { ffi::impala_cuda_bf16_supported() } => None,
        Device::Cuda(i) => Some(format!(
            "CUDA device {i} cannot convolve in bfloat16 (it needs compute capability 8.0 or \
             newer and cuDNN 8)"
        )),
        other => Some(format!("bfloat16 autocast runs on the CPU and CUDA, not on {other:?}")),
    };
    match refusal {
        None => Ok(()),
        Some(why) => Err(LearnerError::Precision {
            reason: format!(
                "precision = \"{precision}\" is refused: {why}; set precision = \"fp32\""
            ),
        }),
    }
}

/// Whether this CPU has bfloat16 dot products (x86's AVX512-BF16, which every AMX CPU has;
/// ARM's BF16), without which libtorch emulates bfloat16 and runs slower than float32.
fn cpu_has_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("bf16")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Why a CPU with (or without) bfloat16 instructions cannot run bf16-mixed, if it cannot.
fn cpu_bf16_refusal(has_bf16: bool) -> Option<String> {
    (!has_bf16).then(|| {
        "this CPU has no bfloat16 instructions (AVX512-BF16 or AMX on x86, BF16 on ARM), so \
         libtorch would emulate bfloat16 and run slower than float32"
            .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_without_bf16_is_refused_with_the_reason() {
        let why = cpu_bf16_refusal(false).unwrap_or_default();
        assert!(why.contains("no bfloat16 instructions"), "{why}");
        assert!(why.contains("AVX512-BF16"), "{why}");
        assert_eq!(cpu_bf16_refusal(true), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_thread_that_flushes_denormals_computes_zero_where_others_compute_them() {
        use tch::Tensor;
        // 1e-37 * 1e-3 is 1e-40, below float32's smallest normal value (1.2e-38).
        let tiny = || {
            let x = Tensor::from_slice(&[1e-37f32]) * 1e-3;
            f32::try_from(x).unwrap_or(f32::NAN)
        };
        let (kept, flushed) = std::thread::spawn(move || {
            let kept = tiny();
            assert!(flush_denormals(), "every x86-64 CPU can flush denormals");
            (kept, tiny())
        })
        .join()
        .unwrap_or((f32::NAN, f32::NAN));
        assert!(kept > 0.0 && kept < f32::MIN_POSITIVE, "{kept}");
        assert_eq!(flushed, 0.0);
    }

    #[test]
    fn guards_nest_and_restore() -> Result<()> {
        assert!(!Autocast::is_enabled(Device::Cpu));
        let outer = Autocast::bf16(Device::Cpu)?;
        {
            let _inner = Autocast::bf16(Device::Cpu)?;
            assert!(Autocast::is_enabled(Device::Cpu));
        }
        assert!(Autocast::is_enabled(Device::Cpu), "the inner guard restores the outer's state");
        drop(outer);
        assert!(!Autocast::is_enabled(Device::Cpu));
        Ok(())
    }
}
