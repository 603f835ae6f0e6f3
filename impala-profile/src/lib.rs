#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde::Serialize;

/// What a thread spends its time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    /// Env runner: the envs' `step`/`reset` (including waiting for env workers).
    EnvStep,
    /// Env runner: policy inference (actions, and values of truncated episodes).
    Inference,
    /// Env runner: writing rows into the fragment and allocating it.
    FragmentBuild,
    /// Env runner: loading broadcast weights into its policy.
    WeightApply,
    /// Env runner: waiting for a sample request (its fragments are not collected yet).
    RunnerIdle,
    /// Driver: waiting for fragments (`timeout_s_sampler_manager`).
    DriverWait,
    /// Driver: `training_step` bookkeeping outside the other activities.
    DriverLoop,
    /// Driver or aggregation worker: concatenating fragments into train batches, mixing in
    /// replay.
    BatchBuild,
    /// Driver: sending weights to the runners.
    WeightBroadcast,
    /// Learner: waiting for a train batch.
    LearnerWait,
    /// Learner or loader: turning a train batch into tensors on the learner's devices.
    LearnerLoad,
    /// Learner: forward pass, V-trace and backward pass.
    LearnerGrad,
    /// Learner: gradient clipping, the optimizer step and its finiteness guard.
    LearnerOptimizer,
    /// Learner: copying the weights off the learner for a broadcast.
    WeightSnapshot,
}

/// Every activity, in report order.
pub const ACTIVITIES: [Activity; 14] = [
    Activity::EnvStep,
    Activity::Inference,
    Activity::FragmentBuild,
    Activity::WeightApply,
    Activity::RunnerIdle,
    Activity::DriverWait,
    Activity::DriverLoop,
    Activity::BatchBuild,
    Activity::WeightBroadcast,
    Activity::LearnerWait,
    Activity::LearnerLoad,
    Activity::LearnerGrad,
    Activity::LearnerOptimizer,
    Activity::WeightSnapshot,
];

impl Activity {
    /// The activity's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Activity::EnvStep => "env_step",
            Activity::Inference => "inference",
            Activity::FragmentBuild => "fragment_build",
            Activity::WeightApply => "weight_apply",
            Activity::RunnerIdle => "runner_idle",
            Activity::DriverWait => "driver_wait",
            Activity::DriverLoop => "driver_loop",
            Activity::BatchBuild => "batch_build",
            Activity::WeightBroadcast => "weight_broadcast",
            Activity::LearnerWait => "learner_wait",
            Activity::LearnerLoad => "learner_load",
            Activity::LearnerGrad => "learner_grad",
            Activity::LearnerOptimizer => "learner_optimizer",
            Activity::WeightSnapshot => "weight_snapshot",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns accounting on for the rest of the process (threads register at their first span).
pub fn enable() {
    let _ = started();
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether [`enable`] was called.
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// When accounting started, and the cores' counters then.
fn started() -> &'static (Instant, Vec<CoreTimes>) {
    static STARTED: OnceLock<(Instant, Vec<CoreTimes>)> = OnceLock::new();
    STARTED.get_or_init(|| (Instant::now(), core_times()))
}

/// One thread's totals, shared with the registry so [`report`] reads them while it runs.
#[derive(Debug)]
struct Slot {
    name: String,
    tid: Option<u32>,
    registered: Instant,
    /// The thread's CPU seconds at registration (what it used before is not reported).
    cpu_at_start: Option<f64>,
    nanos: [AtomicU64; ACTIVITIES.len()],
    /// CPU seconds read when the thread ended (it cannot be read from `/proc` after that).
    cpu_at_exit: Mutex<Option<f64>>,
}

fn registry() -> &'static Mutex<Vec<Arc<Slot>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Arc<Slot>>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// This thread's slot and the span it is in now.
struct Local {
    slot: Arc<Slot>,
    current: Option<(Activity, Instant)>,
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Ok(mut cpu) = self.slot.cpu_at_exit.lock() {
            *cpu = self.slot.tid.and_then(thread_cpu_s);
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    LOCAL
        .try_with(|cell| {
            let mut local = cell.try_borrow_mut().ok()?;
            let local = local.get_or_insert_with(|| {
                let tid = current_tid();
                let slot = Arc::new(Slot {
                    name: std::thread::current().name().unwrap_or("unnamed").to_string(),
                    tid,
                    registered: Instant::now(),
                    cpu_at_start: tid.and_then(thread_cpu_s),
                    nanos: Default::default(),
                    cpu_at_exit: Mutex::new(None),
                });
                if let Ok(mut all) = registry().lock() {
                    all.push(Arc::clone(&slot));
                }
                Local { slot, current: None }
            });
            Some(f(local))
        })
        .ok()
        .flatten()
}

fn charge(slot: &Slot, activity: Activity, since: Instant, now: Instant) {
    let nanos = now.saturating_duration_since(since).as_nanos();
    slot.nanos[activity.index()]
        .fetch_add(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Charges this thread's time to `activity` until the guard drops (then to the span it
/// interrupted, if any). Does nothing unless [`enable`] was called.
#[must_use = "the span ends when the guard drops"]
pub fn span(activity: Activity) -> Span {
    if !is_enabled() {
        return Span { outer: None, active: false };
    }
    let outer = with_local(|local| {
        let now = Instant::now();
        let outer = local.current.take();
        if let Some((a, since)) = outer {
            charge(&local.slot, a, since, now);
        }
        local.current = Some((activity, now));
        outer.map(|(a, _)| a)
    });
    Span { outer: outer.flatten(), active: true }
}

/// The guard of a [`span`].
#[derive(Debug)]
pub struct Span {
    outer: Option<Activity>,
    active: bool,
}

impl Drop for Span {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let outer = self.outer;
        with_local(|local| {
            let now = Instant::now();
            if let Some((a, since)) = local.current.take() {
                charge(&local.slot, a, since, now);
            }
            local.current = outer.map(|a| (a, now));
        });
    }
}

/// One thread's wall time by activity.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    /// The thread's name (e.g. `impala-learner`, `env-runner-1`).
    pub name: String,
    /// Seconds since the thread's first span.
    pub wall_s: f64,
    /// Seconds per activity (only those it had).
    pub activities: BTreeMap<String, f64>,
    /// Wall time in no span.
    pub other_s: f64,
    /// The share of `wall_s` of each activity, and of `other`.
    pub shares: BTreeMap<String, f64>,
    /// CPU seconds (user + system) the thread used since its first span, where the OS tells.
    pub cpu_s: Option<f64>,
}

/// Where the time went since [`enable`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds since [`enable`].
    pub wall_s: f64,
    /// Every thread that had a span.
    pub threads: Vec<ThreadReport>,
    /// Each core's busy share (user + system + nice + irq) since [`enable`], where the OS tells.
    pub core_utilisation: Vec<f64>,
}

impl Report {
    /// The report as a table: per thread its wall and CPU time and the shares of its
    /// activities (those of at least 0.5%), largest first.
    ///
    /// ```
    /// use impala_profile::{Report, ThreadReport};
    /// let learner = ThreadReport {
    ///     name: "impala-learner".into(),
    ///     wall_s: 10.0,
    ///     activities: [("learner_grad".to_string(), 8.0)].into(),
    ///     other_s: 2.0,
    ///     shares: [("learner_grad".to_string(), 0.8), ("other".to_string(), 0.2)].into(),
    ///     cpu_s: Some(9.5),
    /// };
    /// let report = Report { wall_s: 10.0, threads: vec![learner], core_utilisation: vec![0.5] };
    /// let table = report.table();
    /// assert!(table.starts_with("profile over 10.0 s (cores busy: 50%):"), "{table}");
    /// assert!(table.contains("learner_grad 80%, other 20%"), "{table}");
    /// ```
    pub fn table(&self) -> String {
        let cores: Vec<String> =
            self.core_utilisation.iter().map(|u| format!("{:.0}%", u * 100.0)).collect();
        let mut out = format!(
            "profile over {:.1} s (cores busy: {}):\n",
            self.wall_s,
            if cores.is_empty() { "unknown".to_string() } else { cores.join(" ") }
        );
        for t in &self.threads {
            let mut shares: Vec<(&String, &f64)> =
                t.shares.iter().filter(|(_, &s)| s >= 0.005).collect();
            shares.sort_by(|a, b| b.1.total_cmp(a.1));
            let shares: Vec<String> =
                shares.iter().map(|(k, s)| format!("{k} {:.0}%", *s * 100.0)).collect();
            let cpu = t.cpu_s.map_or_else(|| "?".to_string(), |c| format!("{c:.1}"));
            out += &format!(
                "  {:<22} wall {:>6.1} s  cpu {:>6} s  {}\n",
                t.name,
                t.wall_s,
                cpu,
                shares.join(", ")
            );
        }
        out
    }
}

/// The totals so far (threads keep running).
pub fn report() -> Report {
    let (start, cores_then) = started();
    let now = Instant::now();
    // This thread's open span counts up to now.
    with_local(|local| {
        if let Some((a, since)) = local.current {
            charge(&local.slot, a, since, now);
            local.current = Some((a, now));
        }
    });
    let slots = registry().lock().map(|all| all.clone()).unwrap_or_default();
    let threads = slots
        .iter()
        .map(|slot| {
            let wall_s = now.saturating_duration_since(slot.registered).as_secs_f64();
            let activities: BTreeMap<String, f64> = ACTIVITIES
                .iter()
                .map(|&a| {
                    (
                        a.name().to_string(),
                        slot.nanos[a.index()].load(Ordering::Relaxed) as f64 * 1e-9,
                    )
                })
                .filter(|(_, s)| *s > 0.0)
                .collect();
            let busy: f64 = activities.values().sum();
            let other_s = (wall_s - busy).max(0.0);
            let share = |s: f64| if wall_s > 0.0 { s / wall_s } else { 0.0 };
            let mut shares: BTreeMap<String, f64> =
                activities.iter().map(|(k, &s)| (k.clone(), share(s))).collect();
            shares.insert("other".into(), share(other_s));
            let cpu_s = slot
                .tid
                .and_then(thread_cpu_s)
                .or_else(|| slot.cpu_at_exit.lock().ok().and_then(|cpu| *cpu))
                .map(|cpu| cpu - slot.cpu_at_start.unwrap_or(0.0));
            ThreadReport { name: slot.name.clone(), wall_s, activities, other_s, shares, cpu_s }
        })
        .collect();
    let cores_now = core_times();
    let core_utilisation = cores_then
        .iter()
        .zip(&cores_now)
        .map(|(a, b)| {
            let total = b.total.saturating_sub(a.total) as f64;
            if total > 0.0 {
                b.busy.saturating_sub(a.busy) as f64 / total
            } else {
                0.0
            }
        })
        .collect();
    Report {
        wall_s: now.saturating_duration_since(*start).as_secs_f64(),
        threads,
        core_utilisation,
    }
}

/// This thread's id, from `/proc/thread-self` (`PID/task/TID`).
fn current_tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Clock ticks per second of `/proc`'s times (`USER_HZ`, 100 on Linux's common builds).
const TICKS_PER_S: f64 = 100.0;

/// A thread's user + system CPU seconds, from `/proc/self/task/TID/stat`.
fn thread_cpu_s(tid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the `(name)`, which may hold spaces: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

/// One core's counters from `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy)]
struct CoreTimes {
    busy: u64,
    total: u64,
}

fn core_times() -> Vec<CoreTimes> {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return Vec::new() };
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            // user nice system idle iowait irq softirq steal
            let v: Vec<u64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            let get = |i: usize| v.get(i).copied().unwrap_or(0);
            let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
            CoreTimes { busy, total: busy + get(3) + get(4) }
        })
        .collect()
}
