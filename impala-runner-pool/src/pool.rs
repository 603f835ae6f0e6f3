//! The driver's side: runner slots that a transport's runners claim.
//!
//! A slot is one incarnation of one runner id, opened by the group through a [`PoolLauncher`].
//! The group's requests accumulate in it (samples counted, only the newest weights kept) whether
//! or not a runner holds it; the [`Claim`] that holds it takes them for its runner. A claim that
//! ends before its runner is ready gives the slot back untouched; one that ends after is a failed
//! runner, reported to the group, which relaunches the slot for the next runner that claims it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use impala_core::Weights;
use impala_sampler::{
    EnvRunnerHandle, EnvRunnerLauncher, Fragment, MultiAgentFragment, ReplySender, RunnerReply,
    RunnerRequest,
};

use crate::{Assignment, PoolError, Result, RunEnv};

/// What a transport calls to wake the one waiting for a slot or for work: it only signals (a
/// `Notify`, a channel send) and never calls into the pool.
pub type Wakeup = Arc<dyn Fn() + Send + Sync>;

/// What one runner group's slots hand every runner that takes them: the env (checked by the
/// runner and used to validate its fragments), the application's session data (impala-rs:
/// the config, seeds and TorchScript module) and whether to LZ4-compress uint8 observations on the wire.
#[derive(Debug, Clone)]
pub struct RunSession {
    /// The driver's env: a single-agent spec, or a multi-agent one with its policies'.
    pub env: RunEnv,
    /// Opaque to the pool and the transport; handed to the runner's
    /// [`BuildRunner`](crate::BuildRunner).
    pub session: Vec<u8>,
    /// RLlib's `compress_observations`.
    pub compress_observations: bool,
}

/// What the group asked of a slot: samples its claim has not taken yet, and the newest weights
/// of each policy (each claim takes them once, so a runner that takes the slot later gets them).
#[derive(Default)]
struct Pending {
    samples: u32,
    weights: Vec<Option<Arc<Weights>>>,
}

enum Holder {
    /// No runner holds the slot.
    Free,
    /// Claim `id` holds it; `ready` once its runner built its env runner.
    Held { id: u64, ready: bool },
    /// The runner that held it failed; the group will join it and launch a new slot.
    Failed,
}

struct Slot {
    runner_id: usize,
    incarnation: u64,
    replies: ReplySender,
    run: Arc<RunSession>,
    pending: Pending,
    holder: Holder,
    /// The holder's wake: requests arrived or the slot went away.
    wake: Option<Wakeup>,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    next_claim: u64,
    /// Whoever found no free slot: woken when one frees.
    waiting: Vec<Wakeup>,
}

impl State {
    /// The slot of incarnation `incarnation` of runner `runner_id`, while the group has not
    /// joined it.
    fn slot_mut(&mut self, runner_id: usize, incarnation: u64) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.runner_id == runner_id && s.incarnation == incarnation)
    }

    /// That slot, if claim `claim` holds it.
    fn held_mut(&mut self, runner_id: usize, incarnation: u64, claim: u64) -> Option<&mut Slot> {
        self.slot_mut(runner_id, incarnation)
            .filter(|s| matches!(s.holder, Holder::Held { id, .. } if id == claim))
    }

    fn ready_count(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s.holder, Holder::Held { ready: true, .. })).count()
    }
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a runner becomes ready or fails, for [`RunnerPool::wait_for_runners`].
    ready_changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain bookkeeping behind; keep serving.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes everyone waiting for a free slot (they claim again; the losers wait again).
    fn slot_freed(&self) {
        let waiting = std::mem::take(&mut self.lock().waiting);
        for wake in waiting {
            wake();
        }
    }
}

/// The slots of every runner group launched on it, for runners that any transport brings
/// (cheap to clone: clones share the slots).
#[derive(Clone)]
pub struct RunnerPool {
    shared: Arc<Shared>,
}

impl Default for RunnerPool {
    fn default() -> Self {
        RunnerPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                ready_changed: Condvar::new(),
            }),
        }
    }
}

impl std::fmt::Debug for RunnerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("RunnerPool")
            .field("slots", &state.slots.len())
            .field("ready", &state.ready_count())
            .finish()
    }
}

impl RunnerPool {
    /// A pool without slots.
    pub fn new() -> Self {
        Self::default()
    }

    /// A launcher whose slots hand runners `run`: give it to
    /// [`EnvRunnerGroup::with_launcher`](impala_sampler::EnvRunnerGroup::with_launcher). Slots
    /// of an earlier launcher that are still open keep their runners until the group that
    /// launched them joins them.
    pub fn launcher(&self, run: RunSession) -> PoolLauncher {
        PoolLauncher { shared: Arc::clone(&self.shared), run: Arc::new(run) }
    }

    /// How many slots a ready runner holds now.
    pub fn num_ready(&self) -> usize {
        self.shared.lock().ready_count()
    }

    /// Waits until `expected` slots hold ready runners, or `timeout` passes; returns how many
    /// do. Errors when none came.
    pub fn wait_for_runners(&self, expected: usize, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            let ready = state.ready_count();
            let now = Instant::now();
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if ready >= expected || left.is_some_and(|l| l.is_zero()) {
                if ready == 0 && expected > 0 {
                    return Err(PoolError::NoRunners {
                        ready,
                        expected,
                        seconds: timeout.as_secs_f64(),
                    });
                }
                return Ok(ready);
            }
            // No deadline (a timeout too far away): wake now and then to look again.
            let wait = left.unwrap_or(Duration::from_secs(3600));
            state = match self.shared.ready_changed.wait_timeout(state, wait) {
                Ok((s, _)) => s,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Takes the lowest free slot for a runner (one that will only serve `expect_env`, when
    /// given). `None` when no slot is free: `wake` is called once one may be (claim again
    /// then). The claim keeps `wake` and calls it when the group asks something of the slot
    /// or the slot goes away. Errors when the free slot's env is not the one the runner
    /// expects.
    pub fn claim(&self, expect_env: Option<&str>, wake: &Wakeup) -> Result<Option<Claim>> {
        let mut state = self.shared.lock();
        state.next_claim += 1;
        let id = state.next_claim;
        let free = state
            .slots
            .iter_mut()
            .filter(|s| matches!(s.holder, Holder::Free))
            .min_by_key(|s| s.runner_id);
        let Some(slot) = free else {
            if !state.waiting.iter().any(|w| Arc::ptr_eq(w, wake)) {
                state.waiting.push(Arc::clone(wake));
            }
            return Ok(None);
        };
        if let Some(expects) = expect_env.filter(|e| !e.is_empty() && *e != slot.run.env.id()) {
            return Err(PoolError::OtherEnv {
                expects: expects.to_string(),
                trains: slot.run.env.id().to_string(),
            });
        }
        slot.holder = Holder::Held { id, ready: false };
        slot.wake = Some(Arc::clone(wake));
        Ok(Some(Claim {
            shared: Arc::clone(&self.shared),
            id,
            runner_id: slot.runner_id,
            incarnation: slot.incarnation,
            run: Arc::clone(&slot.run),
            replies: slot.replies.clone(),
            ready: false,
            weights: Vec::new(),
        }))
    }
}

/// Starts runner slots on a [`RunnerPool`] (see [`RunnerPool::launcher`]).
pub struct PoolLauncher {
    shared: Arc<Shared>,
    run: Arc<RunSession>,
}

impl std::fmt::Debug for PoolLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolLauncher").field("env", &self.run.env.id()).finish_non_exhaustive()
    }
}

impl EnvRunnerLauncher for PoolLauncher {
    /// Opens a free slot for the runner id and incarnation; the next runner that claims one (or
    /// one already waiting) takes it. Never blocks.
    fn launch(&mut self, replies: ReplySender) -> impala_sampler::Result<Box<dyn EnvRunnerHandle>> {
        let (runner_id, incarnation) = (replies.runner_id(), replies.incarnation());
        {
            let mut state = self.shared.lock();
            state.slots.retain(|s| s.runner_id != runner_id);
            state.slots.push(Slot {
                runner_id,
                incarnation,
                replies,
                run: Arc::clone(&self.run),
                pending: Pending::default(),
                holder: Holder::Free,
                wake: None,
            });
        }
        self.shared.slot_freed();
        Ok(Box::new(SlotHandle { shared: Arc::clone(&self.shared), runner_id, incarnation }))
    }
}

/// The group's end of one slot.
struct SlotHandle {
    shared: Arc<Shared>,
    runner_id: usize,
    incarnation: u64,
}

impl EnvRunnerHandle for SlotHandle {
    fn send(&mut self, request: RunnerRequest) -> bool {
        let wake = {
            let mut state = self.shared.lock();
            let Some(slot) = state.slot_mut(self.runner_id, self.incarnation) else {
                return false;
            };
            if matches!(slot.holder, Holder::Failed) {
                return false;
            }
            match request {
                RunnerRequest::Sample => slot.pending.samples += 1,
                RunnerRequest::SetWeights { policy, weights, .. } => {
                    let pending = &mut slot.pending.weights;
                    if pending.len() <= policy {
                        pending.resize(policy + 1, None);
                    }
                    pending[policy] = Some(weights);
                }
                // The slot ends when the group joins it.
                RunnerRequest::Stop => return true,
            }
            slot.wake.clone()
        };
        if let Some(wake) = wake {
            wake();
        }
        true
    }

    fn join(self: Box<Self>, _deadline: Option<Instant>) -> impala_sampler::Result<()> {
        let mut state = self.shared.lock();
        let at = state
            .slots
            .iter()
            .position(|s| s.runner_id == self.runner_id && s.incarnation == self.incarnation);
        // Its claim sees the slot gone and stops the runner.
        let wake = at.and_then(|i| state.slots.remove(i).wake);
        drop(state);
        if let Some(wake) = wake {
            wake();
        }
        Ok(())
    }
}

/// The weights of one policy a claim handed its runner. At most one weights message per policy
/// is on its way at a time (the runner acts only with the newest before each fragment, so the
/// ones in between would be sent for nothing); the newest version bounds the versions its
/// fragments may carry.
#[derive(Default)]
struct WeightsHanded {
    last: Option<u64>,
    newest: Option<u64>,
    in_flight: bool,
}

/// What the group asked of a slot since its claim last looked: send these to the runner.
#[derive(Debug)]
pub struct Work {
    /// Weights to act with, as (policy index, weights): the newest of each policy, once; none
    /// for a policy while its last ones are on their way.
    pub weights: Vec<(usize, Arc<Weights>)>,
    /// More fragments to sample (none before the runner is ready).
    pub samples: u32,
}

/// How a claim whose runner went away ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Before the runner was ready: the slot went back to the pool untouched.
    Released,
    /// After: a failed runner, reported to the group.
    Failed,
}

/// One runner's hold on one slot: what a transport's session turns its messages into. Dropped
/// without [`release`](Self::release), [`fail`](Self::fail) or [`lost`](Self::lost), it leaves
/// the slot as it is (the transport is closing).
pub struct Claim {
    shared: Arc<Shared>,
    id: u64,
    runner_id: usize,
    incarnation: u64,
    run: Arc<RunSession>,
    replies: ReplySender,
    ready: bool,
    /// Per policy, what was handed.
    weights: Vec<WeightsHanded>,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("runner_id", &self.runner_id)
            .field("incarnation", &self.incarnation)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl Claim {
    /// The runner id (1-based) of the slot.
    pub fn runner_id(&self) -> usize {
        self.runner_id
    }

    /// Which incarnation of the runner the slot is.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// What the slot's runner group hands its runners.
    pub fn run(&self) -> &RunSession {
        &self.run
    }

    /// What the runner builds its env runner from.
    pub fn assignment(&self) -> Assignment {
        Assignment {
            runner_id: self.runner_id,
            incarnation: self.incarnation,
            env: self.run.env.clone(),
            session: self.run.session.clone(),
        }
    }

    /// Whether the runner said it is ready.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The newest weights version of policy `policy` handed to the runner: none of its
    /// fragments may carry a newer one.
    pub fn newest_weights_version(&self, policy: usize) -> Option<u64> {
        self.weights.get(policy).and_then(|handed| handed.newest)
    }

    /// Whether the group still has the slot (it has not joined it).
    pub fn is_open(&self) -> bool {
        self.shared.lock().slot_mut(self.runner_id, self.incarnation).is_some()
    }

    /// Takes what the group asked since the last call: the newest weights of each policy
    /// unless the runner has not taken that policy's last ones yet, samples once the runner is
    /// ready. `None` when the slot is gone: tell the runner to stop.
    pub fn take_work(&mut self) -> Option<Work> {
        let (pending, samples) = {
            let mut state = self.shared.lock();
            let slot = state.slot_mut(self.runner_id, self.incarnation)?;
            let samples = if self.ready { std::mem::take(&mut slot.pending.samples) } else { 0 };
            (slot.pending.weights.clone(), samples)
        };
        if self.weights.len() < pending.len() {
            self.weights.resize_with(pending.len(), WeightsHanded::default);
        }
        let mut weights = Vec::new();
        for (policy, (w, handed)) in pending.into_iter().zip(&mut self.weights).enumerate() {
            let Some(w) = w.filter(|w| handed.last != Some(w.version) && !handed.in_flight) else {
                continue;
            };
            handed.last = Some(w.version);
            handed.newest = handed.newest.max(Some(w.version));
            handed.in_flight = true;
            weights.push((policy, w));
        }
        Some(Work { weights, samples })
    }

    /// The runner built its env runner (with the weights handed first): samples can go to it.
    pub fn ready(&mut self) {
        if self.ready {
            return;
        }
        self.ready = true;
        for handed in &mut self.weights {
            handed.in_flight = false;
        }
        let wake = {
            let mut state = self.shared.lock();
            state.held_mut(self.runner_id, self.incarnation, self.id).and_then(|slot| {
                slot.holder = Holder::Held { id: self.id, ready: true };
                slot.wake.clone()
            })
        };
        self.shared.ready_changed.notify_all();
        // Samples queued while the runner was building can go now.
        if let Some(wake) = wake {
            wake();
        }
    }

    /// A fragment the runner sampled, for the group (dropped once the group joined the slot).
    pub fn deliver(&self, fragment: Fragment) {
        if self.is_open() {
            self.replies.send(RunnerReply::Fragment(Box::new(fragment)));
        }
    }

    /// A multi-agent runner's fragment (a batch per policy), for the group (dropped once the
    /// group joined the slot).
    pub fn deliver_multi_agent(&self, fragment: MultiAgentFragment) {
        if self.is_open() {
            self.replies.send(RunnerReply::MultiAgentFragment(Box::new(fragment)));
        }
    }

    /// The runner acts with policy `policy`'s weights handed last, `latency` after they were
    /// sent: newer ones of that policy can go.
    pub fn weights_applied(&mut self, policy: usize, latency: Duration) {
        if self.is_open() {
            self.replies.send(RunnerReply::WeightsApplied { policy, latency });
            if let Some(handed) = self.weights.get_mut(policy) {
                handed.in_flight = false;
            }
        }
    }

    /// Gives the slot back untouched (the runner cannot serve this run, or left before it was
    /// ready); the next runner takes it.
    pub fn release(self) {
        {
            let mut state = self.shared.lock();
            if let Some(slot) = state.held_mut(self.runner_id, self.incarnation, self.id) {
                slot.holder = Holder::Free;
                slot.wake = None;
            }
        }
        self.shared.slot_freed();
    }

    /// Reports the runner failed, with `reason`, so the group restarts the slot.
    pub fn fail(self, reason: String) {
        let mut state = self.shared.lock();
        let Some(slot) = state.held_mut(self.runner_id, self.incarnation, self.id) else {
            return;
        };
        slot.holder = Holder::Failed;
        slot.wake = None;
        slot.replies.send(RunnerReply::Failed(reason));
        drop(state);
        self.shared.ready_changed.notify_all();
    }

    /// The runner went away (its connection broke, it fell silent): once it was ready that is a
    /// failed runner, reported with `reason`; before, the slot simply goes back to the pool.
    pub fn lost(self, reason: String) -> Lost {
        if self.ready {
            self.fail(reason);
            Lost::Failed
        } else {
            self.release();
            Lost::Released
        }
    }
}
