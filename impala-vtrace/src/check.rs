//! Input validation shared by every entry point: shapes, finiteness, thresholds.

use crate::{Result, VTraceError, VTraceFloat};

/// The leading dimension of an argument made of rows of `row_len` values (`T` of a `[T, B]`
/// argument whose `B` is known, `N` of `[N, K]` actions).
pub(crate) fn whole_rows(
    argument: &'static str,
    len: usize,
    row_len: usize,
    row: &'static str,
) -> Result<usize> {
    match len.checked_div(row_len) {
        Some(n) if n * row_len == len => Ok(n),
        // Rows of zero values: only an empty argument fits, and then there is nothing to do.
        None if len == 0 => Ok(0),
        _ => Err(VTraceError::NotWholeRows { argument, got: len, row_len, row }),
    }
}

/// What a row of a time-major `[T, B]` argument is, for [`whole_rows`].
pub(crate) const TIME_STEP: &str = "B values, the length of `bootstrap_value`";

/// Fails unless `len` is the number of values of `shape`.
pub(crate) fn expect_len(argument: &'static str, len: usize, shape: &[usize]) -> Result<()> {
    if len == shape.iter().product::<usize>() {
        Ok(())
    } else {
        Err(VTraceError::ShapeMismatch { argument, expected: shape.to_vec(), got: len })
    }
}

/// Fails on the first NaN or infinite value of the named arguments, all of `shape`, naming the
/// argument and the value's multi-index.
///
/// The common all-finite case is one branch-free pass over all arguments at once (`x * 0` is 0
/// for a finite `x` and NaN otherwise, so a sum of them is 0 exactly when all are finite), in
/// fixed-size chunks so it vectorises; only a failing chunk is searched argument by argument.
#[inline(always)]
pub(crate) fn expect_all_finite<F: VTraceFloat, const K: usize>(
    arguments: [(&'static str, &[F]); K],
    shape: &[usize],
) -> Result<()> {
    const CHUNK: usize = 256;
    let len: usize = shape.iter().product();
    for start in (0..len).step_by(CHUNK) {
        let end = (start + CHUNK).min(len);
        let chunks = arguments.map(|(_, data)| &data[start..end]);
        let chunk_ok = (0..end - start).fold(true, |ok, i| {
            let zero = chunks.iter().fold(F::zero(), |z, c| z + c[i] * F::zero());
            ok & (zero == F::zero())
        });
        if chunk_ok {
            continue;
        }
        for (argument, data) in arguments {
            expect_finite(argument, &data[start..end], shape, start)?;
        }
    }
    Ok(())
}

/// Fails on the first NaN or infinite value of `data`, which starts at flat position `offset`
/// of an argument of `shape`.
pub(crate) fn expect_finite<F: VTraceFloat>(
    argument: &'static str,
    data: &[F],
    shape: &[usize],
    offset: usize,
) -> Result<()> {
    match data.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(VTraceError::NonFinite {
            argument,
            index: unravel(offset + i, shape),
            value: data[i].to_f64().unwrap_or(f64::NAN),
        }),
    }
}

/// Fails on a NaN or negative clipping threshold; `None` and `+inf` both mean no clipping.
pub(crate) fn expect_threshold<F: VTraceFloat>(
    argument: &'static str,
    threshold: Option<F>,
) -> Result<()> {
    match threshold {
        Some(x) if x.is_nan() || x < F::zero() => {
            Err(VTraceError::InvalidThreshold { argument, value: x.to_f64().unwrap_or(f64::NAN) })
        }
        _ => Ok(()),
    }
}

/// The row-major multi-index of flat position `flat` in `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        if dim > 0 {
            *slot = flat % dim;
            flat /= dim;
        }
    }
    index
}
