//! The `--summary-json` line of a run that `impala train` finished ([`TrainSummary::of`]).

use impala::run::Trained;

use crate::TrainSummary;

impl TrainSummary {
    /// The summary of `trained`, which took `wall_s` seconds, with its profile (if it was
    /// profiled) as written to the run folder.
    pub fn of(trained: &Trained, wall_s: f64) -> serde_json::Result<Self> {
        let profile = trained.profile.as_ref().map(serde_json::to_value).transpose()?;
        Ok(TrainSummary::new(&trained.summary, &trained.stop, trained.seed, wall_s, profile))
    }
}
