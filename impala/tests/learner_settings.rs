//! Config options as the learner sees them: device plans, refused counts, queue timeouts.
