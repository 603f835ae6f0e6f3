//! One env worker process: its start-up handshake and the fixed-size frames that drive it.
//!
//! The other side is `python/impala_gym_worker.py`, whose docstring describes the protocol.
//! Commands and replies are 16-byte frames on the worker's stdin and stdout; observations and
//! actions are in a [`SharedRegion`]. Every read has a deadline (`sample_timeout_s`): a worker
//! that does not answer is killed. Each read also watches the worker process itself (a pidfd),
//! so a worker that exits is reported at once even when a process it forked keeps its pipes
//! open. Every worker leads a process group of its own, and the group is killed when the
//! worker stops or dies, so what its envs forked does not outlive it.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use impala_core::{AgentSpec, EnvSpec, MultiAgentSpec, Space};
use serde::Deserialize;

use crate::shm::{Layout, SharedRegion};
use crate::{GymError, GymSettings, Result};

/// The worker's Python source, run with `python -c`.
const WORKER_SOURCE: &str = include_str!("../python/impala_gym_worker.py");

/// Bytes of a command or reply frame.
const FRAME: usize = 16;

/// Largest error message a worker may send (longer ones are a protocol error).
const MAX_MESSAGE: usize = 64 * 1024;

/// Largest info payload a worker may send with one reply ([`GymSettings::record_infos`]).
const MAX_INFOS: usize = 64 * 1024 * 1024;

/// How long a worker gets to exit after `Q` before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// What a worker answered for one slot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// Done; for steps, the reward and flags. `reset`: the step ended the episode and the
    /// worker already reset the env (Gymnasium's same-step autoreset): the final observation is
    /// in the slot's final row, the next episode's first one in its observation row.
    /// `continues`: the step ended the episode for learning but the game goes on (an Atari
    /// life lost with `episodic_life`; [`impala_core::Env::episode_continues`]).
    /// Multi-agent envs: `observed`, the agent's observation row was written; `all_terminated`
    /// / `all_truncated`, RLlib's `"__all__"` flags of its env.
    Ok {
        reward: f64,
        terminated: bool,
        truncated: bool,
        reset: bool,
        continues: bool,
        observed: bool,
        all_terminated: bool,
        all_truncated: bool,
        /// With [`GymSettings::record_infos`]: the info of the step (or reset), pickled; and,
        /// where the step ended the episode and the worker reset the env, the reset's. Empty
        /// for an empty info, and always without `record_infos`.
        infos: Box<Infos>,
    },
    /// The env raised; with `restart_failed_sub_environments` the worker recreated it.
    Failed { message: String, recreated: bool },
}

/// The pickled infos an ok reply carries (see [`Reply::Ok`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Infos {
    pub info: Vec<u8>,
    pub reset_info: Vec<u8>,
}

impl Infos {
    /// Splits a worker's info payload: the first part's length (4 bytes, little-endian), the
    /// first part, then the second.
    fn parse(payload: &[u8]) -> Option<Self> {
        let (len, rest) = payload.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        (len <= rest.len())
            .then(|| Infos { info: rest[..len].to_vec(), reset_info: rest[len..].to_vec() })
    }
}

/// A running worker hosting `layout.count` envs.
pub(crate) struct EnvWorker {
    env: String,
    process: WorkerProcess,
    commands: Option<ChildStdin>,
    replies: ChildStdout,
    pending: Vec<u8>,
    /// Replies that arrived for other slots than the one being waited for.
    ready: Vec<Option<Reply>>,
    /// Slots whose action is in shared memory but whose step command is not sent yet: the
    /// steps of all of a worker's envs go out in one write, as one command per 64 slots.
    unsent_steps: Vec<usize>,
    shm: SharedRegion,
    spec: EnvSpec,
    /// A multi-agent env's agents (its slots are (env, agent) pairs); `None` for other envs.
    agents: Option<MultiAgentSpec>,
    timeout: Duration,
    /// How long to poll for a reply before sleeping until one comes ([`GymSettings::spin`]).
    spin: Option<AdaptiveSpin>,
    /// Why the worker is unusable, once it is (every later call fails with this).
    broken: Option<String>,
    /// The observation bounds checked until an observation falls outside them.
    bounds: ObsBounds,
}

/// A spin that adapts as glibc's adaptive mutexes do: waking a sleeping thread costs tens of
/// microseconds here (longer than a worker takes to step a few envs, and the worker's write
/// pays for it too), so the runner polls for a reply for a while before it sleeps. The spin
/// doubles (up to [`AdaptiveSpin::MAX`]) whenever a reply came during it and halves (down to
/// [`AdaptiveSpin::MIN`]) whenever none did, so a runner whose worker steps slow envs (Atari,
/// Box2D) soon spins little.
#[derive(Debug, Clone, Copy)]
struct AdaptiveSpin {
    current: Duration,
}

impl AdaptiveSpin {
    const MIN: Duration = Duration::from_micros(10);
    const MAX: Duration = Duration::from_micros(200);

    fn new() -> Self {
        AdaptiveSpin { current: Self::MIN }
    }

    /// Polls `ready` until it holds or the spin is over; adapts the spin to the result.
    fn wait(&mut self, mut ready: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        loop {
            if ready() {
                self.current = (self.current * 2).min(Self::MAX);
                return true;
            }
            if start.elapsed() >= self.current {
                self.current = (self.current / 2).max(Self::MIN);
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

impl std::fmt::Debug for EnvWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvWorker")
            .field("env", &self.env)
            .field("pid", &self.process.pid())
            .field("slots", &self.ready.len())
            .finish_non_exhaustive()
    }
}

/// The space descriptions a worker sends at start-up.
#[derive(Debug, Deserialize)]
struct Hello {
    error: Option<String>,
    observation_space: Option<SpaceJson>,
    action_space: Option<SpaceJson>,
    max_episode_steps: Option<usize>,
    /// A multi-agent env's agents, in its order.
    agents: Option<Vec<AgentJson>>,
}

/// One agent of a multi-agent env's start-up line.
#[derive(Debug, Deserialize)]
struct AgentJson {
    id: String,
    observation_space: Option<SpaceJson>,
    action_space: Option<SpaceJson>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum SpaceJson {
    Discrete { n: usize },
    MultiDiscrete { nvec: Vec<usize> },
    Box { shape: Vec<usize>, low: Vec<Bound>, high: Vec<Bound> },
    Bytes { shape: Vec<usize> },
}

/// A Box bound: a number, or `"inf"` / `"-inf"` (JSON has no infinities).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Bound {
    Number(f64),
    Text(String),
}

impl Bound {
    fn value(&self) -> Option<f32> {
        match self {
            Bound::Number(x) => Some(*x as f32),
            Bound::Text(t) if t == "inf" => Some(f32::INFINITY),
            Bound::Text(t) if t == "-inf" => Some(f32::NEG_INFINITY),
            Bound::Text(_) => None,
        }
    }
}

impl EnvWorker {
    /// Starts a worker with `count` envs and waits (up to the timeout) for its spaces.
    pub fn spawn(settings: &GymSettings, count: usize) -> Result<Self> {
        let env = settings.env.clone();
        if count > usize::from(u16::MAX) {
            // Slots travel as 16-bit numbers.
            return Err(GymError::Protocol {
                env,
                reason: format!(
                    "{count} envs in one worker; at most 65535 (lower num_envs_per_env_worker)"
                ),
            });
        }
        let setup = serde_json::json!({
            "env": settings.env,
            "env_config": settings.env_config,
            "count": count,
            "parent_pid": std::process::id(),
            "sys_path": settings.sys_path,
            "creator": settings.creator,
            "restart_failed_sub_environments": settings.restart_failed_sub_environments,
            "atari_vector": settings.is_atari(),
            "spin": settings.spin,
            "record_infos": settings.record_infos,
        });
        let mut child = Command::new(&settings.python)
            .arg("-c")
            .arg(WORKER_SOURCE)
            .arg(setup.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A group of its own, killed with the worker (see `WorkerProcess::stop`). A Ctrl-C
            // in a terminal then no longer reaches the worker, which ignored it anyway.
            .process_group(0)
            .spawn()
            .map_err(|e| GymError::PythonNotFound {
                python: settings.python.display().to_string(),
                env: env.clone(),
                reason: e.to_string(),
            })?;
        let pipes = (child.stdin.take(), child.stdout.take());
        // A worker that fails below is killed when `starting` drops.
        let mut starting = Starting { process: Some(WorkerProcess::new(child)) };
        let (Some(commands), Some(replies)) = pipes else {
            return Err(GymError::Protocol { env, reason: "no pipes to the worker".into() });
        };
        let deadline = Instant::now() + settings.timeout;
        let mut io = LineReader {
            env: env.clone(),
            timeout: settings.timeout,
            replies,
            pending: Vec::new(),
        };
        let pid = starting.pid();
        let line = io.line(deadline, pid, "start the env", &mut starting)?;
        let hello: Hello = serde_json::from_str(&line).map_err(|e| GymError::Protocol {
            env: env.clone(),
            reason: format!("bad start-up line {line:?}: {e}"),
        })?;
        if let Some(message) = hello.error {
            return Err(creation_error(settings, message));
        }
        let (spec, agents) = spec_from(settings, hello)?;
        // A multi-agent env's agents are slots of their own, in rows as wide as the widest.
        let per_agent: Vec<EnvSpec> = match &agents {
            Some(multi) => multi.agents.iter().map(|a| multi.agent_env_spec(a)).collect(),
            None => vec![spec.clone()],
        };
        let obs_bytes = matches!(spec.observation_space, Space::Bytes { .. });
        if per_agent.iter().any(|a| matches!(a.observation_space, Space::Bytes { .. }) != obs_bytes)
        {
            return Err(GymError::UnsupportedSpace {
                env: env.clone(),
                which: "observation",
                reason: "some agents observe uint8 images and others numbers; give every agent \
                         the same kind"
                    .into(),
            });
        }
        let layout = Layout {
            count: count * per_agent.len(),
            obs_dim: per_agent
                .iter()
                .map(|a| a.observation_space.flat_dim())
                .max()
                .unwrap_or(1)
                .max(1),
            obs_bytes,
            action_dim: per_agent.iter().map(|a| a.action_space.flat_dim()).max().unwrap_or(1),
        };
        let io_error = |what: &'static str| {
            let env = env.clone();
            move |cause| GymError::Io { env, what, cause }
        };
        let mut shm = SharedRegion::create(layout).map_err(io_error("create shared memory"))?;
        let shm_line = serde_json::json!({
            "path": shm.path(),
            "size": layout.size(),
            "obs_dim": layout.obs_dim,
            "obs_dtype": layout.obs_dtype(),
            "action_dim": layout.action_dim,
            "final_offset": layout.final_offset(0),
            "action_offset": layout.action_offset(0),
        });
        let mut commands = commands;
        writeln!(commands, "{shm_line}").map_err(io_error("send the shared memory"))?;
        let ready = io.line(deadline, pid, "map shared memory", &mut starting)?;
        if !ready.contains("\"ready\"") {
            return Err(GymError::Protocol {
                env: env.clone(),
                reason: format!("expected ready, got {ready:?}"),
            });
        }
        shm.unlink();
        let LineReader { replies, pending, .. } = io;
        let process = starting.process.take().ok_or_else(|| GymError::Protocol {
            env: env.clone(),
            reason: "worker lost during start-up".into(),
        })?;
        let bounds = ObsBounds::new(&spec, agents.as_ref());
        Ok(EnvWorker {
            env,
            process,
            commands: Some(commands),
            replies,
            pending,
            ready: vec![None; layout.count],
            unsent_steps: Vec::with_capacity(layout.count),
            shm,
            spec,
            agents,
            timeout: settings.timeout,
            spin: settings.spin.then(AdaptiveSpin::new),
            broken: None,
            bounds,
        })
    }

    /// The envs' spec (the same for every slot; a multi-agent env's first agent's).
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// A multi-agent env's agents and spaces; `None` for single-agent envs.
    pub fn agents(&self) -> Option<&MultiAgentSpec> {
        self.agents.as_ref()
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// How many envs this worker hosts.
    pub fn count(&self) -> usize {
        self.ready.len() / self.agents.as_ref().map_or(1, MultiAgentSpec::num_agents)
    }

    /// Sends a reset of `slot` (after any steps begun before it).
    pub fn reset(&mut self, slot: usize, seed: Option<u64>) -> Result<()> {
        self.usable()?;
        let mut frames = self.step_frames();
        frames.extend_from_slice(&frame(b'R', u8::from(seed.is_some()), slot, seed.unwrap_or(0)));
        self.write(&frames)
    }

    /// Puts `slot`'s action into shared memory; its step command goes out with the other
    /// begun steps at the next [`EnvWorker::flush_steps`], wait or reset.
    pub fn begin_step(&mut self, slot: usize, action: &[f32]) -> Result<()> {
        self.usable()?;
        self.shm.write_action(slot, action);
        if !self.unsent_steps.contains(&slot) {
            self.unsent_steps.push(slot);
        }
        Ok(())
    }

    /// The `M` commands for the begun steps: a base slot and a 64-bit mask of the slots from
    /// there.
    fn step_frames(&mut self) -> Vec<u8> {
        self.unsent_steps.sort_unstable();
        let mut frames = Vec::new();
        let mut slots = self.unsent_steps.drain(..).peekable();
        while let Some(base) = slots.next() {
            let mut mask = 1u64;
            while let Some(slot) = slots.next_if(|&s| s < base + 64) {
                mask |= 1 << (slot - base);
            }
            frames.extend_from_slice(&frame(b'M', 0, base, mask));
        }
        frames
    }

    /// Sends the begun steps (one command per 64 slots).
    pub fn flush_steps(&mut self) -> Result<()> {
        self.usable()?;
        let frames = self.step_frames();
        self.write(&frames)
    }

    fn write(&mut self, frames: &[u8]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let written = match self.commands.as_mut() {
            Some(commands) => commands.write_all(frames),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        written.map_err(|_| self.died())
    }

    /// Waits for `slot`'s reply (replies for other slots are kept for their callers), sending
    /// the begun steps first.
    pub fn wait(&mut self, slot: usize, what: &'static str) -> Result<Reply> {
        self.flush_steps()?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(reply) = self.ready.get_mut(slot).and_then(Option::take) {
                return Ok(reply);
            }
            let (got, reply) = self.next_reply(deadline, what)?;
            if got >= self.ready.len() {
                return Err(self.protocol(format!("reply for slot {got} of {}", self.ready.len())));
            }
            self.ready[got] = Some(reply);
        }
    }

    /// Copies `slot`'s observation into `obs`.
    pub fn read_obs(&mut self, slot: usize, obs: &mut [f32]) {
        self.shm.read_obs(slot, obs);
        self.check_bounds(slot, obs);
    }

    /// Copies the final observation of `slot`'s episode (one its step ended and the worker
    /// reset, [`Reply::Ok`]'s `reset`) into `obs`.
    pub fn read_final_obs(&mut self, slot: usize, obs: &mut [f32]) {
        self.shm.read_final_obs(slot, obs);
        self.check_bounds(slot, obs);
    }

    /// Warns (once for the worker's envs) about an observation outside its finite Box bounds,
    /// as Gymnasium's passive env checker does; after that, observations are not checked.
    fn check_bounds(&mut self, slot: usize, obs: &[f32]) {
        let Some((agent, low, high)) = self.bounds.for_slot(slot) else {
            return;
        };
        let n = obs.len().min(low.len());
        let (obs, low, high) = (&obs[..n], &low[..n], &high[..n]);
        // No early exit: this loop vectorises, and observations are nearly always inside.
        let outside = obs
            .iter()
            .zip(low)
            .zip(high)
            .fold(false, |out, ((&x, &lo), &hi)| out | (x < lo) | (x > hi));
        if !outside {
            return;
        }
        let Some(i) = (0..n).find(|&i| obs[i] < low[i] || obs[i] > high[i]) else {
            return;
        };
        let agent = agent.map(|a| format!(" for agent `{a}`")).unwrap_or_default();
        let (lo, hi) = (low[i], high[i]);
        let index = self.bounds.index(slot, i);
        self.bounds.checking = false;
        tracing::warn!(
            "env `{}` returned an observation{agent} outside its observation space: element \
             {index} is {}, outside [{lo}, {hi}] (Gymnasium's env checker warns of this too); \
             warned once per env worker (pid {}), later observations are not checked",
            self.env,
            obs[i],
            self.process.pid(),
        );
    }

    fn usable(&self) -> Result<()> {
        match &self.broken {
            None => Ok(()),
            Some(reason) => Err(GymError::WorkerDied {
                env: self.env.clone(),
                pid: self.process.pid(),
                status: reason.clone(),
            }),
        }
    }

    fn next_reply(&mut self, deadline: Instant, what: &'static str) -> Result<(usize, Reply)> {
        self.fill(FRAME, deadline, what)?;
        let frame: [u8; FRAME] =
            self.pending[..FRAME].try_into().map_err(|_| self.protocol("short frame".into()))?;
        let slot = usize::from(u16::from_le_bytes([frame[2], frame[3]]));
        let len = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]) as usize;
        let reward = f64::from_le_bytes(frame[8..16].try_into().unwrap_or([0; 8]));
        let reply = match frame[0] {
            b'O' => {
                let infos = if len == 0 {
                    Box::default()
                } else {
                    if len > MAX_INFOS {
                        return Err(self.protocol(format!("info payload of {len} bytes")));
                    }
                    self.fill(FRAME + len, deadline, what)?;
                    match Infos::parse(&self.pending[FRAME..FRAME + len]) {
                        Some(infos) => Box::new(infos),
                        None => return Err(self.protocol("malformed info payload".into())),
                    }
                };
                self.pending.drain(..FRAME + len);
                Reply::Ok {
                    infos,
                    reward,
                    terminated: frame[1] & 1 != 0,
                    truncated: frame[1] & 2 != 0,
                    reset: frame[1] & 4 != 0,
                    continues: frame[1] & 8 != 0,
                    observed: frame[1] & 16 != 0,
                    all_terminated: frame[1] & 32 != 0,
                    all_truncated: frame[1] & 64 != 0,
                }
            }
            status @ (b'E' | b'X') => {
                if len > MAX_MESSAGE {
                    return Err(self.protocol(format!("error message of {len} bytes")));
                }
                self.fill(FRAME + len, deadline, what)?;
                let message =
                    String::from_utf8_lossy(&self.pending[FRAME..FRAME + len]).into_owned();
                self.pending.drain(..FRAME + len);
                Reply::Failed { message, recreated: status == b'X' }
            }
            other => return Err(self.protocol(format!("unknown reply status {other:#04x}"))),
        };
        Ok((slot, reply))
    }

    /// Reads until `pending` holds at least `n` bytes.
    fn fill(&mut self, n: usize, deadline: Instant, what: &'static str) -> Result<()> {
        let mut chunk = [0u8; 1 << 14];
        while self.pending.len() < n {
            let replies = &self.replies;
            let now = || readable_now(replies).unwrap_or(true);
            let caught = self.spin.as_mut().is_some_and(|spin| spin.wait(now));
            let readable = if caught {
                Ok(Readiness::Readable)
            } else {
                wait_readable(replies, &self.process, deadline)
            };
            match readable {
                Ok(Readiness::Readable) => {}
                // The worker is gone though its pipe is open (a process it forked holds it).
                Ok(Readiness::Exited) => return Err(self.died()),
                Ok(Readiness::TimedOut) => return Err(self.timed_out(what)),
                Err(cause) => {
                    return Err(GymError::Io {
                        env: self.env.clone(),
                        what: "wait for the worker",
                        cause,
                    })
                }
            }
            match self.replies.read(&mut chunk) {
                Ok(0) => return Err(self.died()),
                Ok(k) => self.pending.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(self.died()),
            }
        }
        Ok(())
    }

    fn timed_out(&mut self, what: &'static str) -> GymError {
        self.process.kill();
        self.process.stop(EXIT_GRACE);
        let seconds = self.timeout.as_secs_f64();
        self.broken = Some(format!("killed after not answering within {seconds} s"));
        GymError::Timeout { env: self.env.clone(), pid: self.process.pid(), seconds, what }
    }

    fn died(&mut self) -> GymError {
        // The pipe closed or the process exited: wait for it (briefly) and its status; what it
        // forked is killed with its group.
        let status = self.process.stop(EXIT_GRACE);
        self.broken = Some(status.clone());
        GymError::WorkerDied { env: self.env.clone(), pid: self.process.pid(), status }
    }

    fn protocol(&mut self, reason: String) -> GymError {
        self.process.kill();
        self.broken = Some(format!("killed after a protocol error: {reason}"));
        GymError::Protocol { env: self.env.clone(), reason }
    }
}

impl Drop for EnvWorker {
    fn drop(&mut self) {
        if let Some(mut commands) = self.commands.take() {
            let _ = commands.write_all(&frame(b'Q', 0, 0, 0));
            // Dropping stdin closes it: a worker waiting for commands sees EOF and exits.
        }
        self.process.stop(EXIT_GRACE);
    }
}

/// A worker process in a process group of its own (whose id is the worker's pid), watched
/// through a pidfd.
///
/// Its group is signalled only while the worker is not reaped: until then its pid, and so the
/// group's id, cannot be reused by another process.
struct WorkerProcess {
    child: Child,
    /// Readable once the worker exited (Linux 5.3 and later; `None` where it cannot be had,
    /// and exits are then checked with `waitid` every [`EXIT_CHECK`]).
    pidfd: Option<rustix::fd::OwnedFd>,
    /// The described exit status, once reaped.
    status: Option<String>,
}

/// How often a worker's exit is checked while waiting for it to answer, where there is no pidfd.
const EXIT_CHECK: Duration = Duration::from_millis(100);

impl WorkerProcess {
    fn new(child: Child) -> Self {
        #[cfg(target_os = "linux")]
        let pidfd = rustix::process::Pid::from_child(&child);
        #[cfg(target_os = "linux")]
        let pidfd = rustix::process::pidfd_open(pidfd, rustix::process::PidfdFlags::empty()).ok();
        #[cfg(not(target_os = "linux"))]
        let pidfd = None;
        WorkerProcess { child, pidfd, status: None }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rustix_pid(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_child(&self.child)
    }

    /// Whether the worker exited (without reaping it).
    fn exited(&self) -> bool {
        self.wait_exit(Duration::ZERO)
    }

    /// Waits up to `grace` for the worker to exit (without reaping it); whether it did.
    fn wait_exit(&self, grace: Duration) -> bool {
        if self.status.is_some() {
            return true;
        }
        let until = Instant::now() + grace;
        if let Some(pidfd) = &self.pidfd {
            use rustix::event::{poll, PollFd, PollFlags};
            loop {
                let left = until.saturating_duration_since(Instant::now());
                let timeout = timespec(left);
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                match poll(&mut fds, Some(&timeout)) {
                    Err(rustix::io::Errno::INTR) => continue,
                    // An error (which cannot be here) counts as exited: the worker is killed.
                    polled => return polled.map_or(true, |n| n > 0),
                }
            }
        }
        use rustix::process::{waitid, WaitId, WaitIdOptions};
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        loop {
            // An error (it was reaped, which cannot be here) counts as exited.
            let exited =
                waitid(WaitId::Pid(self.rustix_pid()), options).map_or(true, |s| s.is_some());
            if exited || Instant::now() >= until {
                return exited;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILLs the worker and its process group (what its envs forked), unless it was reaped.
    fn kill(&mut self) {
        if self.status.is_none() {
            let _ = rustix::process::kill_process_group(
                self.rustix_pid(),
                rustix::process::Signal::KILL,
            );
            let _ = self.child.kill();
        }
    }

    /// Waits up to `grace` for the worker to exit, then kills its process group (and it, if it
    /// is still there) and reaps it; returns its exit status, described. Stopping again returns
    /// the same status.
    fn stop(&mut self, grace: Duration) -> String {
        if let Some(status) = &self.status {
            return status.clone();
        }
        self.wait_exit(grace);
        self.kill();
        let status = self.child.wait().map_or_else(|e| e.to_string(), describe_exit);
        self.status = Some(status.clone());
        status
    }
}

/// `exited with status N` or `killed by signal S (SIGNAME)`.
fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    let Some(signal) = status.signal() else {
        return status.to_string();
    };
    let name = match signal {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    };
    let core = if status.core_dumped() { ", core dumped" } else { "" };
    format!("killed by signal {signal}{name}{core}")
}

/// A worker being started: killed and reaped if start-up fails.
struct Starting {
    process: Option<WorkerProcess>,
}

impl Starting {
    fn pid(&self) -> u32 {
        self.process.as_ref().map_or(0, WorkerProcess::pid)
    }

    /// The exit status of a worker that stopped during start-up.
    fn status(&mut self) -> String {
        self.process.as_mut().map_or_else(String::new, |p| p.stop(EXIT_GRACE))
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
            process.stop(Duration::ZERO);
        }
    }
}

/// The finite Box bounds that a worker's observations are checked against, per agent (one for
/// single-agent envs), until one falls outside them.
struct ObsBounds {
    /// Per agent: its id (multi-agent envs), its bounds and its Box's shape, or `None` where
    /// there is nothing to check (not a Box, or no finite bound).
    agents: Vec<Option<AgentBounds>>,
    /// Still checking: no observation was outside its bounds yet.
    checking: bool,
}

struct AgentBounds {
    agent: Option<String>,
    low: Vec<f32>,
    high: Vec<f32>,
    shape: Vec<usize>,
}

impl ObsBounds {
    fn new(spec: &EnvSpec, agents: Option<&MultiAgentSpec>) -> Self {
        let bounds = |space: &Space, agent: Option<String>| match space {
            Space::Box { low, high, shape } if low.iter().chain(high).any(|b| b.is_finite()) => {
                Some(AgentBounds {
                    agent,
                    low: low.clone(),
                    high: high.clone(),
                    shape: shape.clone(),
                })
            }
            _ => None,
        };
        let agents: Vec<_> = match agents {
            Some(multi) => multi
                .agents
                .iter()
                .map(|a| bounds(&a.observation_space, Some(a.id.clone())))
                .collect(),
            None => vec![bounds(&spec.observation_space, None)],
        };
        let checking = agents.iter().any(Option::is_some);
        ObsBounds { agents, checking }
    }

    /// The bounds of the agent whose observation `slot` holds (slots go agent by agent).
    fn of_slot(&self, slot: usize) -> Option<&AgentBounds> {
        self.agents.get(slot % self.agents.len().max(1))?.as_ref()
    }

    /// The agent, low and high bounds to check `slot`'s observation against, if any.
    fn for_slot(&self, slot: usize) -> Option<(Option<&str>, &[f32], &[f32])> {
        if !self.checking {
            return None;
        }
        let bounds = self.of_slot(slot)?;
        Some((bounds.agent.as_deref(), &bounds.low, &bounds.high))
    }

    /// Flat element `i` of `slot`'s observation, with its index in the Box's shape where the
    /// shape has more than one dimension.
    fn index(&self, slot: usize, i: usize) -> String {
        let shape = self.of_slot(slot).map_or(&[][..], |b| &b.shape[..]);
        if shape.len() < 2 {
            return i.to_string();
        }
        let mut index = vec![0; shape.len()];
        let mut rest = i;
        for (d, &size) in index.iter_mut().zip(shape).rev() {
            *d = rest % size.max(1);
            rest /= size.max(1);
        }
        format!("{i} (index {index:?} of shape {shape:?})")
    }
}

/// Reads the JSON lines of the start-up handshake.
struct LineReader {
    env: String,
    timeout: Duration,
    replies: ChildStdout,
    pending: Vec<u8>,
}

impl LineReader {
    fn line(
        &mut self,
        deadline: Instant,
        pid: u32,
        what: &'static str,
        starting: &mut Starting,
    ) -> Result<String> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.pending[..end]).into_owned();
                self.pending.drain(..=end);
                return Ok(line);
            }
            if self.pending.len() > MAX_MESSAGE * 16 {
                return Err(GymError::Protocol {
                    env: self.env.clone(),
                    reason: "start-up line too long".into(),
                });
            }
            let died = |starting: &mut Starting| GymError::WorkerDied {
                env: self.env.clone(),
                pid,
                status: format!(
                    "{} during start-up, before it reported (its Python output is above)",
                    starting.status()
                ),
            };
            let readable = match starting.process.as_ref() {
                Some(process) => wait_readable(&self.replies, process, deadline),
                None => Ok(Readiness::Exited),
            };
            match readable {
                Ok(Readiness::Readable) => {}
                Ok(Readiness::Exited) => return Err(died(starting)),
                Ok(Readiness::TimedOut) => {
                    let seconds = self.timeout.as_secs_f64();
                    return Err(GymError::Timeout { env: self.env.clone(), pid, seconds, what });
                }
                Err(cause) => {
                    let what = "wait for the worker";
                    return Err(GymError::Io { env: self.env.clone(), what, cause });
                }
            }
            match self.replies.read(&mut chunk) {
                Ok(0) => {
                    return Err(GymError::WorkerDied {
                        env: self.env.clone(),
                        pid,
                        status: format!(
                            "{} during start-up, before it reported (its Python output is above)",
                            starting.status()
                        ),
                    })
                }
                Ok(k) => self.pending.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(cause) => {
                    return Err(GymError::Io {
                        env: self.env.clone(),
                        what: "read from the worker",
                        cause,
                    })
                }
            }
        }
    }
}

/// `d` as poll's timeout.
fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// What waiting on a worker's reply pipe came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    /// The pipe has data, or EOF.
    Readable,
    /// The pipe has nothing, but the worker exited (a process it forked holds the pipe open).
    Exited,
    /// Neither before the deadline.
    TimedOut,
}

/// Whether `pipe` has data (or EOF) now.
fn readable_now(pipe: &ChildStdout) -> std::io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(pipe, PollFlags::IN)];
    let now = timespec(Duration::ZERO);
    loop {
        match poll(&mut fds, Some(&now)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until `pipe` has data (or EOF), `process` exited, or `deadline` passed (a deadline
/// already passed: checks once). Data wins over an exit: replies the worker wrote before it
/// exited are read first.
fn wait_readable(
    pipe: &ChildStdout,
    process: &WorkerProcess,
    deadline: Instant,
) -> std::io::Result<Readiness> {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Without a pidfd the exit is checked between slices of the wait.
        let slice = if process.pidfd.is_some() { left } else { left.min(EXIT_CHECK) };
        let timeout = timespec(slice);
        // The pipe, and the pidfd where there is one (else the pipe twice, polled once).
        let mut fds = [
            PollFd::new(pipe, PollFlags::IN),
            match &process.pidfd {
                Some(pidfd) => PollFd::new(pidfd, PollFlags::IN),
                None => PollFd::new(pipe, PollFlags::IN),
            },
        ];
        let watched = if process.pidfd.is_some() { 2 } else { 1 };
        match poll(&mut fds[..watched], Some(&timeout)) {
            Ok(_) if !fds[0].revents().is_empty() => return Ok(Readiness::Readable),
            Ok(_) if watched == 2 && !fds[1].revents().is_empty() => return Ok(Readiness::Exited),
            Ok(_) if process.pidfd.is_none() && process.exited() => return Ok(Readiness::Exited),
            Ok(_) if left.is_zero() => return Ok(Readiness::TimedOut),
            Ok(_) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A start-up failure, with a fix where the message points at one.
fn creation_error(settings: &GymSettings, message: String) -> GymError {
    let python = settings.python.display().to_string();
    let hint = if message.contains("No module named 'gymnasium'")
        || message.contains("import of gymnasium halted")
    {
        format!("; install it with `{python} -m pip install gymnasium` or name another interpreter with `python_executable` / IMPALA_PYTHON")
    } else if message.contains("No module named 'ale_py'") {
        format!("; Atari needs ale-py: `{python} -m pip install ale-py`")
    } else if message.contains("NameNotFound")
        || message.contains("not found in registry")
        || message.contains("doesn't exist")
    {
        "; the id is neither a native env (`impala envs`) nor a registered Gymnasium env; a user's env is written `package.module:ClassName`".into()
    } else if message.contains("unexpected keyword argument") {
        "; check `env_config`: its keys are passed as keyword arguments to the env".into()
    } else {
        String::new()
    };
    GymError::Creation { env: settings.env.clone(), python, message, hint }
}

/// The env's spec from the worker's description of its spaces.
/// One 16-byte command: op, flag, slot, padding, then a seed (resets) or a slot mask (steps).
fn frame(op: u8, flag: u8, slot: usize, value: u64) -> [u8; FRAME] {
    let mut frame = [0u8; FRAME];
    frame[0] = op;
    frame[1] = flag;
    frame[2..4].copy_from_slice(&(slot as u16).to_le_bytes());
    frame[8..16].copy_from_slice(&value.to_le_bytes());
    frame
}

/// The env's spec from its start-up line, and a multi-agent env's agents (the spec is then its
/// first agent's).
fn spec_from(settings: &GymSettings, hello: Hello) -> Result<(EnvSpec, Option<MultiAgentSpec>)> {
    let env = &settings.env;
    let space = |which: &'static str, json: Option<SpaceJson>| -> Result<Space> {
        let unsupported =
            |reason: String| GymError::UnsupportedSpace { env: env.clone(), which, reason };
        match json.ok_or_else(|| unsupported("not reported".into()))? {
            SpaceJson::Discrete { n } if n > 0 => Ok(Space::Discrete(n)),
            SpaceJson::Discrete { n } => Err(unsupported(format!("Discrete({n})"))),
            SpaceJson::MultiDiscrete { nvec }
                if !nvec.is_empty() && nvec.iter().all(|&n| n > 0) =>
            {
                Ok(Space::MultiDiscrete(nvec))
            }
            SpaceJson::MultiDiscrete { nvec } => {
                Err(unsupported(format!("MultiDiscrete({nvec:?})")))
            }
            SpaceJson::Box { shape, low, high } => {
                let to_f32 = |v: Vec<Bound>| {
                    v.iter()
                        .map(Bound::value)
                        .collect::<Option<Vec<f32>>>()
                        .ok_or_else(|| unsupported("a bound is not a number".into()))
                };
                Space::boxed(to_f32(low)?, to_f32(high)?, shape)
                    .map_err(|e| unsupported(e.to_string()))
            }
            SpaceJson::Bytes { shape } if which == "observation" => Ok(Space::Bytes { shape }),
            SpaceJson::Bytes { shape } => Err(unsupported(format!("uint8 Box{shape:?}"))),
        }
    };
    if let Some(agents) = hello.agents {
        let agents = agents
            .into_iter()
            .map(|a| {
                Ok(AgentSpec {
                    id: a.id,
                    observation_space: space("observation", a.observation_space)?,
                    action_space: space("action", a.action_space)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let multi = MultiAgentSpec::new(env.clone(), agents, hello.max_episode_steps)
            .map_err(|e| GymError::Protocol { env: env.clone(), reason: e.to_string() })?;
        let first = multi.agent_env_spec(&multi.agents[0]);
        return Ok((first, Some(multi)));
    }
    let spec = EnvSpec {
        id: env.clone(),
        observation_space: space("observation", hello.observation_space)?,
        action_space: space("action", hello.action_space)?,
        max_episode_steps: hello.max_episode_steps,
    };
    Ok((spec, None))
}
