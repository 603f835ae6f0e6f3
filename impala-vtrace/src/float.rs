//! The float types V-trace runs on.

use std::fmt::{Debug, Display};

mod sealed {
    /// What the kernels need beyond `num_traits::Float`; private so it is no public API.
    pub trait Sealed: Copy {
        /// `e^self`, in a form the compiler vectorises where that is possible.
        fn exp_vectorisable(self) -> Self;
    }

    impl Sealed for f32 {
        #[inline(always)]
        fn exp_vectorisable(self) -> Self {
            super::exp_f32(self)
        }
    }

    impl Sealed for f64 {
        /// The platform `exp` (correctly rounded or nearly): f64 is the precision path.
        #[inline(always)]
        fn exp_vectorisable(self) -> Self {
            self.exp()
        }
    }
}

/// `f32` or `f64`: the element types every function of this crate is generic over.
///
/// Sealed: the kernels rely on IEEE semantics (a `+inf` threshold clips nothing, `exp` of a
/// finite value is never NaN), which only the primitive floats guarantee.
pub trait VTraceFloat:
    num_traits::Float + Debug + Display + Default + Send + Sync + 'static + sealed::Sealed
{
}

impl VTraceFloat for f32 {}
impl VTraceFloat for f64 {}

/// `min(a, b)` for values that are never NaN, written so it compiles to one `minps`/`minpd`
/// and the loops around it vectorise (`Float::min` adds NaN handling that blocks that).
#[inline(always)]
pub(crate) fn min_of<F: VTraceFloat>(a: F, b: F) -> F {
    if a < b {
        a
    } else {
        b
    }
}

/// A clipping threshold as the kernels use it: `None` (no clipping) becomes `+inf`, which
/// `min_of` leaves every finite-or-infinite rho untouched by, so there is no branch per element.
pub(crate) fn threshold_or_inf<F: VTraceFloat>(threshold: Option<F>) -> F {
    threshold.unwrap_or_else(F::infinity)
}

/// `e^x` for f32 without a libm call, so a loop of it vectorises (libm's `expf` is a call per
/// element and was most of V-trace's time). Cephes' `expf` method: `x = n ln2 + r` with
/// `|r| <= ln2 / 2` (Cody-Waite split of ln2), a degree-7 polynomial for `e^r`, and `2^n` built
/// from exponent bits. Within 2 f32 epsilons (relative) of the exact value over f32's normal
/// range (checked against f64 `exp` in the tests).
///
/// `x` saturates to `[-87.3, 88.3]`, so the result stays in `[1.2e-38, 2.1e38]` (f32's normal
/// range, one `2^n` scale) instead of reaching 0 or `+inf`. For V-trace that is a log importance
/// weight beyond +-87: any clipping threshold below 2e38 gives the same result, and without one
/// the target is meaningless either way.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    let x = min_of(x, 88.3_f32);
    let x = if x > -87.3_f32 { x } else { -87.3_f32 };
    // n = round(x / ln2), by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
    const SHIFTER: f32 = 12_582_912.0;
    let shifted = x * std::f32::consts::LOG2_E + SHIFTER;
    let n_f = shifted - SHIFTER;
    let n = (shifted.to_bits() as i32).wrapping_sub(SHIFTER.to_bits() as i32);
    // r = x - n ln2, with ln2 split in a part exact in f32 and a correction.
    let r = x - n_f * 0.693_359_4_f32 - n_f * -2.121_944_4e-4_f32;
    let p = ((((1.987_569_1e-4_f32 * r + 1.398_199_9e-3_f32) * r + 8.333_452e-3_f32) * r
        + 4.166_579_6e-2_f32)
        * r
        + 1.666_666_5e-1_f32)
        * r
        + 0.5_f32;
    let e_r = p * (r * r) + r + 1.0;
    // n is in [-126, 127] after the saturation, so 2^n is a normal f32.
    e_r * f32::from_bits(((n + 127) as u32) << 23)
}
