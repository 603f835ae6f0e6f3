//! The few numpy scalar operations whose results differ from the obvious Rust expression.
//!
//! - `x**2` on a numpy `float64` (or a Python float) calls the C library's `pow(x, 2.0)`, and
//!   on a `float32` `powf(x, 2.0)`. glibc's `pow`/`powf` are not correctly rounded, so they
//!   differ from `x * x` in about 1 of 1,000 random arguments (measured against numpy 2.4 on
//!   glibc 2.36). LLVM rewrites `powf(x, 2.0)` into `x * x`, so the exponent goes through
//!   [`black_box`] to keep the library call.
//! - `np.sin`/`np.cos` on `float32` use numpy's own vectorised kernel on CPUs with FMA3 (every
//!   x86-64 since Haswell, every aarch64): Cody-Waite range reduction and short polynomials
//!   (numpy's `loops_trigonometric.dispatch.cpp`), not `sinf`/`cosf`. [`sin_f32`] and
//!   [`cos_f32`] are that kernel, one lane at a time, with exact fused multiply-adds.
//!   `float64` `sin`/`cos` are the C library's in numpy, as in Rust.

use std::hint::black_box;

/// numpy's `x**2` for a `float64` scalar: `pow(x, 2.0)`.
#[inline]
pub(crate) fn square(x: f64) -> f64 {
    x.powf(black_box(2.0))
}

/// numpy's `x**2` for a `float32` scalar: `powf(x, 2.0)`.
#[inline]
pub(crate) fn square_f32(x: f32) -> f32 {
    x.powf(black_box(2.0))
}

/// Which of the two functions the shared kernel computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trig {
    Sin,
    Cos,
}

/// numpy's `np.sin` for `float32`, as its FMA3 kernel computes it.
pub(crate) fn sin_f32(x: f32) -> f32 {
    sincos_f32(x, Trig::Sin)
}

/// numpy's `np.cos` for `float32`, as its FMA3 kernel computes it.
pub(crate) fn cos_f32(x: f32) -> f32 {
    sincos_f32(x, Trig::Cos)
}

/// One lane of numpy's `simd_sincos_f32`, operation for operation (`MulAdd(a, b, c)` is
/// `a.mul_add(b, c)`, a fused multiply-add).
fn sincos_f32(x: f32, op: Trig) -> f32 {
    const TWO_OVER_PI: f32 = f32::from_bits(0x3f22_f983); // 0x1.45f306p-1
    const PIO2_HIGH: f32 = f32::from_bits(0xbfc9_0fd8); // -0x1.921fb0p+00
    const PIO2_MED: f32 = f32::from_bits(0xb4a8_885a); // -0x1.5110b4p-22
    const PIO2_LOW: f32 = f32::from_bits(0xa7c2_34c4); // -0x1.846988p-48
    const RINT_MAGIC: f32 = f32::from_bits(0x4b40_0000); // 0x1.800000p+23
    if x.is_nan() {
        return f32::NAN;
    }
    // Outside Cody-Waite's range numpy calls the C library. (numpy writes the bounds
    // `71476.0625f` and `117435.992f`; these are the same `f32` values.)
    let max_cody: f32 = if op == Trig::Cos { 71476.06 } else { 117435.99 };
    if x.abs() > max_cody {
        return if op == Trig::Cos { x.cos() } else { x.sin() };
    }
    // Round to the nearest integer quadrant (ties to even). numpy's source multiplies and
    // then adds, but GCC contracts the two into one fused multiply-add (its default
    // `-ffp-contract=fast`), which rounds the product only once.
    let quadrant = x.mul_add(TWO_OVER_PI, RINT_MAGIC) - RINT_MAGIC;
    let r = quadrant.mul_add(PIO2_HIGH, x);
    let r = quadrant.mul_add(PIO2_MED, r);
    let r = quadrant.mul_add(PIO2_LOW, r);
    let r2 = r * r;
    let cos = cosine_poly(r2);
    let sin = sine_poly(r, r2);
    // `quadrant` is a small integer (|x| <= 117435.992), so the cast is exact.
    let mut iquadrant = quadrant as i32;
    if op == Trig::Cos {
        iquadrant += 1;
    }
    let value = if iquadrant & 1 == 0 { sin } else { cos };
    if iquadrant & 2 == 2 {
        0.0 - value
    } else {
        value
    }
}

/// numpy's `simd_cosine_poly_f32`: cos on `[-pi/4, pi/4]` from `x^2`.
fn cosine_poly(x2: f32) -> f32 {
    const INVF8: f32 = f32::from_bits(0x37cc_730b); // 0x1.98e616p-16
    const INVF6: f32 = f32::from_bits(0xbab6_036e); // -0x1.6c06dcp-10
    const INVF4: f32 = f32::from_bits(0x3d2a_aa9e); // 0x1.55553cp-05
    const INVF2: f32 = -0.5;
    const INVF0: f32 = 1.0;
    let r = INVF8.mul_add(x2, INVF6);
    let r = r.mul_add(x2, INVF4);
    let r = r.mul_add(x2, INVF2);
    r.mul_add(x2, INVF0)
}

/// numpy's `simd_sine_poly_f32`: sin on `[-pi/4, pi/4]` from `x` and `x^2`.
fn sine_poly(x: f32, x2: f32) -> f32 {
    const INVF9: f32 = f32::from_bits(0x363e_9dde); // 0x1.7d3bbcp-19
    const INVF7: f32 = f32::from_bits(0xb950_35dd); // -0x1.a06bbap-13
    const INVF5: f32 = f32::from_bits(0x3c08_88cd); // 0x1.11119ap-07
    const INVF3: f32 = f32::from_bits(0xbe2a_aaab); // -0x1.555556p-03
    let r = INVF9.mul_add(x2, INVF7);
    let r = r.mul_add(x2, INVF5);
    let r = r.mul_add(x2, INVF3);
    let r = r.mul_add(x2, 0.0);
    r.mul_add(x, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hex-float constants of numpy's source, decoded independently of the bit patterns
    /// above: `0x1.MMMMMMpE` is `(1 + M / 2^24) * 2^E`.
    #[test]
    fn constants_are_numpys_hex_floats() {
        let hex = |m: u32, e: i32| ((1.0 + f64::from(m) / 16_777_216.0) * 2f64.powi(e)) as f32;
        let cases = [
            (f32::from_bits(0x3f22_f983), hex(0x45f306, -1)),
            (f32::from_bits(0xbfc9_0fd8), -hex(0x921fb0, 0)),
            (f32::from_bits(0xb4a8_885a), -hex(0x5110b4, -22)),
            (f32::from_bits(0xa7c2_34c4), -hex(0x846988, -48)),
            (f32::from_bits(0x4b40_0000), hex(0x800000, 23)),
            (f32::from_bits(0x37cc_730b), hex(0x98e616, -16)),
            (f32::from_bits(0xbab6_036e), -hex(0x6c06dc, -10)),
            (f32::from_bits(0x3d2a_aa9e), hex(0x55553c, -5)),
            (f32::from_bits(0x363e_9dde), hex(0x7d3bbc, -19)),
            (f32::from_bits(0xb950_35dd), -hex(0xa06bba, -13)),
            (f32::from_bits(0x3c08_88cd), hex(0x11119a, -7)),
            (f32::from_bits(0xbe2a_aaab), -hex(0x555556, -3)),
        ];
        for (i, (bits, decoded)) in cases.into_iter().enumerate() {
            assert_eq!(bits.to_bits(), decoded.to_bits(), "constant {i}");
        }
    }

    #[test]
    fn kernel_is_within_two_ulps_of_f64_and_exact_at_zero() {
        assert_eq!(cos_f32(0.0), 1.0);
        assert_eq!(sin_f32(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(sin_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(sin_f32(f32::NAN).is_nan() && cos_f32(f32::INFINITY).is_nan());
        let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        for i in -20_000..20_000 {
            let x = i as f32 * 0.001_37;
            let (s, c) = (f64::from(x).sin() as f32, f64::from(x).cos() as f32);
            // Near a zero of the function the error is relative to the argument's size.
            assert!(ulps(sin_f32(x), s) <= 2 || (sin_f32(x) - s).abs() < 1e-7, "sin {x}");
            assert!(ulps(cos_f32(x), c) <= 2 || (cos_f32(x) - c).abs() < 1e-7, "cos {x}");
        }
        // Beyond Cody-Waite's range: the C library.
        assert_eq!(cos_f32(1e6), 1e6f32.cos());
        assert_eq!(sin_f32(-2e5), (-2e5f32).sin());
    }

    #[test]
    fn squares_call_pow() {
        // 1 + 2^-52 squared is 1 + 2^-51 + 2^-104: both round to 1 + 2^-51.
        let x = 1.0 + f64::EPSILON;
        assert_eq!(square(x), x * x);
        assert_eq!(square(-3.0), 9.0);
        assert_eq!(square_f32(0.5), 0.25);
    }
}
