//! Versioned weight snapshots, passed from the learner to env runners.

/// One named parameter tensor, flattened row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// The parameter's name in the model (e.g. `policy.fc0.weight`).
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major; `data.len()` is the product of `shape`.
    pub data: Vec<f32>,
}

/// A snapshot of a model's parameters with the learner's version counter.
///
/// The learner publishes snapshots in an `Arc`, so every runner in the process reads the same
/// memory; nothing is serialised. Tensors are sorted by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Weights {
    /// Number of learner updates that produced these weights (RLlib's `num_grad_updates`).
    pub version: u64,
    /// The parameters, sorted by name.
    pub tensors: Vec<NamedTensor>,
}

impl Weights {
    /// Builds a snapshot, sorting the tensors by name so layouts compare equal.
    ///
    /// ```
    /// use impala_core::{NamedTensor, Weights};
    /// let w = Weights::new(3, vec![
    ///     NamedTensor { name: "b".into(), shape: vec![1], data: vec![0.5] },
    ///     NamedTensor { name: "a".into(), shape: vec![2], data: vec![1.0, 2.0] },
    /// ]);
    /// assert_eq!(w.tensors[0].name, "a");
    /// assert_eq!(w.num_params(), 3);
    /// ```
    pub fn new(version: u64, mut tensors: Vec<NamedTensor>) -> Self {
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Weights { version, tensors }
    }

    /// Total number of scalar parameters.
    pub fn num_params(&self) -> usize {
        self.tensors.iter().map(|t| t.data.len()).sum()
    }

    /// The tensor with this name, if any.
    pub fn get(&self, name: &str) -> Option<&NamedTensor> {
        self.tensors.binary_search_by(|t| t.name.as_str().cmp(name)).ok().map(|i| &self.tensors[i])
    }
}
