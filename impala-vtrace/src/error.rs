//! The crate's error type.

/// Why a V-trace computation refused its inputs. Every variant names the argument (by its RLlib
/// name) so a caller can tell which tensor was built wrongly.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum VTraceError {
    /// An argument's length does not fit the shape the other arguments imply.
    #[error(
        "`{argument}` must have shape {expected:?} ({} values), got {got} values",
        expected.iter().product::<usize>()
    )]
    ShapeMismatch {
        /// Which argument.
        argument: &'static str,
        /// The expected shape, e.g. `[T, B]`.
        expected: Vec<usize>,
        /// The number of values the argument holds.
        got: usize,
    },
    /// An argument whose length is not a whole number of rows, so its leading dimension (`T`
    /// of a `[T, B]` argument, `N` of `[N, K]` actions) cannot be inferred.
    #[error("`{argument}` has {got} values, not a whole number of rows of {row_len} ({row})")]
    NotWholeRows {
        /// Which argument.
        argument: &'static str,
        /// The number of values the argument holds.
        got: usize,
        /// The length of one row.
        row_len: usize,
        /// What a row is, e.g. "B values, the length of `bootstrap_value`".
        row: &'static str,
    },
    /// A list of per-component log-probabilities with the wrong number of components.
    #[error("`{argument}` must have {expected} action components, got {got}")]
    ComponentMismatch {
        /// Which argument.
        argument: &'static str,
        /// The expected number of components.
        expected: usize,
        /// The number given.
        got: usize,
    },
    /// A NaN or infinite input value.
    #[error("`{argument}`{index:?} is {value}; V-trace inputs must be finite")]
    NonFinite {
        /// Which argument.
        argument: &'static str,
        /// The value's multi-index in the argument's shape, e.g. `[t, b]`.
        index: Vec<usize>,
        /// The offending value.
        value: f64,
    },
    /// A clipping threshold that is NaN or negative (use `None` for no clipping).
    #[error("`{argument}` is {value}; a clipping threshold must be >= 0 (None means no clipping)")]
    InvalidThreshold {
        /// Which argument.
        argument: &'static str,
        /// The threshold given.
        value: f64,
    },
    /// An action-space description with a component of no actions.
    #[error("invalid action space {nvec:?}: every component needs at least one action")]
    InvalidActionSpace {
        /// The number of actions per component (RLlib's MultiDiscrete `nvec`).
        nvec: Vec<usize>,
    },
    /// An action that is not an integer in `0..num_actions`.
    #[error("`{argument}`{index:?} is {action}, not an action index in 0..{num_actions}")]
    InvalidAction {
        /// Which argument.
        argument: &'static str,
        /// The action's multi-index, e.g. `[n, component]`.
        index: Vec<usize>,
        /// The action as given, widened to f64.
        action: f64,
        /// The number of actions of its component.
        num_actions: usize,
    },
}

/// The crate's result alias.
pub type Result<T, E = VTraceError> = std::result::Result<T, E>;
