//! Tests of impala-profile (one process: accounting, once enabled, stays on).

use std::time::Duration;

use impala_profile::{enable, report, span, Activity};

fn busy(d: Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        std::hint::black_box(0u64);
    }
}

#[test]
fn spans_are_exclusive_and_threads_are_reported_by_name() -> Result<(), Box<dyn std::error::Error>>
{
    enable();
    std::thread::Builder::new()
        .name("profiled".into())
        .spawn(|| {
            let _outer = span(Activity::LearnerGrad);
            busy(Duration::from_millis(30));
            {
                // An inner span pauses the outer one.
                let _inner = span(Activity::LearnerOptimizer);
                busy(Duration::from_millis(20));
            }
            busy(Duration::from_millis(10));
        })?
        .join()
        .map_err(|_| "the profiled thread panicked")?;
    let r = report();
    let t = r.threads.iter().find(|t| t.name == "profiled").ok_or("no thread")?;
    let (grad, opt) = (t.activities["learner_grad"], t.activities["learner_optimizer"]);
    assert!((0.038..0.1).contains(&grad), "{grad}");
    assert!((0.018..0.06).contains(&opt), "{opt}");
    assert!(t.shares.values().sum::<f64>() <= 1.0 + 1e-9);
    // The thread used CPU for its busy loops (read when it ended).
    if let Some(cpu) = t.cpu_s {
        assert!(cpu >= 0.0);
    }
    assert!(serde_json::to_string(&r)?.contains("\"learner_grad\""));
    Ok(())
}
