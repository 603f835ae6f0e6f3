//! Python Gymnasium environments for impala-rs, stepped in env worker processes.
//!
//! Any Gymnasium id (`LunarLander-v3`, `ALE/Pong-v5`), or a user's own env written as
//! Gymnasium's entry point `package.module:ClassName` (its `env_config` passed as keyword
//! arguments, RLlib's convention), becomes an [`impala_core::Env`]: a [`GymEnv`]. Each env
//! worker is a Python process hosting one or more envs; it exchanges observations and actions
//! with the runner through shared memory and gets 16-byte commands over a pipe, so nothing is
//! pickled per step. A vector of [`GymEnv`]s steps its workers in parallel
//! ([`impala_core::Env::begin_step`]).
//!
//! - Spaces come from the env: `Box` observations of any shape and dtype (a uint8 `Box` is
//!   [`impala_core::Space::Bytes`]: frames travel as bytes, through shared memory, sample
//!   batches, replay and the learner queue, until the model scales them on its device),
//!   `Discrete` and `MultiDiscrete` observations (as indices), `Dict` and
//!   `Tuple` observations flattened by `gymnasium.spaces.flatten` (Dict keys in the space's
//!   order, Discrete parts one-hot); `Discrete`, `MultiDiscrete`, `MultiBinary` and `Box`
//!   actions (Box actions clipped to their bounds).
//! - `ALE/<Game>-v5` runs in ale-py's `AtariVectorEnv` with IMPALA's preprocessing (noop
//!   reset, frameskip 4 with max-pool, 84x84 grayscale, 4 stacked frames as `[84, 84, 4]`,
//!   fire reset; frames from before a game began repeat its first, as Gymnasium's
//!   `FrameStackObservation`); rewards stay unclipped, so the runner's `clip_rewards` clips
//!   them and episode returns are the game's. With `env_config.episodic_life = true` a life
//!   lost ends the episode for learning while the game goes on (DeepMind's and RLlib's
//!   `EpisodicLifeEnv`; reported returns stay whole games', [`impala_core::Env::episode_continues`]).
//!   `env_config.crop` (pixels cut from the `top`, `bottom`, `left` and `right` of the 210x160
//!   screen) crops the screen before it is area-averaged to `img_height x img_width`, in the
//!   worker, since ale-py can only resize the whole screen.
//!   Seeds of 2^31 or more are reduced modulo 2^31 (ale-py's seeds are 32-bit).
//! - Faults: a Python exception in `reset` or `step`, a worker that dies, or one that does not
//!   answer within `sample_timeout_s` (it is killed) is an error of the env, which the runner
//!   group treats as a failed env runner. A worker's death is seen at once (its pidfd is polled
//!   with its pipe), also when a process its env forked keeps the pipe open, and reported as
//!   `exited with status N` or `killed by signal S`. With `restart_failed_sub_environments`
//!   the worker recreates only the env that raised, and its episode ends truncated at its last
//!   observation.
//! - Observations outside a `Box` observation space's finite bounds are warned of once per
//!   worker (`tracing::warn!`, naming the env, the element, its value and bounds), as
//!   Gymnasium's passive env checker does; they are passed on unchanged.
//! - Workers never outlive the process that started them: they exit when their command pipe
//!   closes or when their parent process is gone (a watchdog thread checks every 0.2 s). Each
//!   leads a process group of its own, killed when the worker stops or dies (and by the worker
//!   itself when its runner is gone), so processes its envs fork (and did not move to a group
//!   of their own) go too.
//!
//! ```no_run
//! use impala_core::Env;
//! use impala_gym::{GymEnvPool, GymSettings};
//!
//! let pool = GymEnvPool::new(GymSettings::new("CartPole-v1"));
//! let mut env = pool.make(0, 0, 0)?; // runner 0, first incarnation, env 0
//! let mut obs = vec![0.0; 4];
//! env.reset(Some(0), &mut obs)?;
//! let outcome = env.step(&[1.0], &mut obs)?;
//! assert_eq!(outcome.reward, 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod multi_agent;
mod shm;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use impala_core::{CoreError, Env, EnvSpec, MultiAgentSpec, StepOutcome};

pub use error::{GymError, Result};
pub use multi_agent::GymMultiAgentEnv;
use worker::{EnvWorker, Infos, Reply};

/// The environment variable that names the Python interpreter (after the config's
/// `python_executable`).
pub const PYTHON_ENV_VAR: &str = "IMPALA_PYTHON";

/// How Python envs are started.
#[derive(Debug, Clone, PartialEq)]
pub struct GymSettings {
    /// A Gymnasium id or an entry point `package.module:Name` (a `gymnasium.Env` subclass, or
    /// a creator taking the `env_config` dict as RLlib's env creators do).
    pub env: String,
    /// Keyword arguments of the env (`gymnasium.make(id, **env_config)`).
    pub env_config: BTreeMap<String, serde_json::Value>,
    /// The interpreter ([`default_python`] unless the config names one).
    pub python: PathBuf,
    /// Envs per runner (`num_envs_per_env_runner`), which sizes a runner's last worker.
    pub num_envs: NonZeroUsize,
    /// Envs hosted by one worker process (`num_envs_per_env_worker`).
    pub envs_per_worker: NonZeroUsize,
    /// How long a worker may take to start or answer (`sample_timeout_s`).
    pub timeout: Duration,
    /// Recreate only the env that raised (RLlib's `restart_failed_sub_environments`).
    pub restart_failed_sub_environments: bool,
    /// Folders put first on the workers' `sys.path` (the working directory by default), so a
    /// user's module imports as it would from a script there.
    pub sys_path: Vec<PathBuf>,
    /// A pickled env creator (RLlib's `register_env(name, creator)`, written by the `impala_rs`
    /// Python package): a file of two pickles, the creating process's `sys.path` (appended to
    /// the workers', so what the creator references imports there too) and the creator. When
    /// set, workers build their envs by calling it with `env_config` (or, for a
    /// `gymnasium.Env` class, its keywords) instead of looking `env` up, and `env` is only the
    /// name the creator was registered under.
    pub creator: Option<PathBuf>,
    /// Poll the pipes for a while before sleeping on them (adaptive spins, on the runner and in
    /// the workers). Waking a sleeping process costs more than stepping a few envs, so this
    /// pays when every worker and runner (and a busy learner) has a core of its own; with more
    /// busy threads than cores a spinning thread takes the core from the one it waits for
    /// (measured: 2 workers and a runner on 2 cores sampled 25% slower with it). Off by default.
    pub spin: bool,
    /// Send each step's and reset's info (pickled; [`impala_core::Env::info`]) for the
    /// episode callbacks' `get_infos()`. Off by default: the workers then skip the infos.
    pub record_infos: bool,
}

impl GymSettings {
    /// One env per worker and runner, the default interpreter, a 60 s timeout (RLlib's
    /// `sample_timeout_s`), the working directory on `sys.path`.
    pub fn new(env: impl Into<String>) -> Self {
        GymSettings {
            env: env.into(),
            env_config: BTreeMap::new(),
            python: default_python(),
            num_envs: NonZeroUsize::MIN,
            envs_per_worker: NonZeroUsize::MIN,
            timeout: Duration::from_secs(60),
            restart_failed_sub_environments: false,
            sys_path: std::env::current_dir().into_iter().collect(),
            creator: None,
            spin: false,
            record_infos: false,
        }
    }

    /// Whether this is an Atari game (`ALE/...`), stepped in ale-py's `AtariVectorEnv`.
    pub fn is_atari(&self) -> bool {
        self.creator.is_none() && self.env.starts_with("ALE/")
    }
}

/// The interpreter Python envs run in: `$IMPALA_PYTHON`, else the project's `.venv/bin/python`
/// (the one `./dev setup` made, found from where this crate was built), else `python3`.
pub fn default_python() -> PathBuf {
    if let Some(python) = std::env::var_os(PYTHON_ENV_VAR).filter(|p| !p.is_empty()) {
        return PathBuf::from(python);
    }
    // The workspace's `.venv` (the crate's parent folder), named without `..` for messages.
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(venv) = crate_dir.parent().map(|root| root.join(".venv/bin/python")) {
        if venv.exists() {
            return venv;
        }
    }
    PathBuf::from("python3")
}

/// Which worker a runner's env belongs to: the building thread, the runner, its incarnation
/// and the env's group of `envs_per_worker`.
type WorkerKey = (ThreadId, usize, u64, usize);

/// Starts env workers and hands out the [`GymEnv`]s they host; envs of one runner share a
/// worker `envs_per_worker` at a time.
#[derive(Debug)]
pub struct GymEnvPool {
    settings: GymSettings,
    /// Each worker and its process id (read without the worker's lock, which a runner blocked
    /// in a step holds).
    workers: Mutex<HashMap<WorkerKey, PooledWorker>>,
}

/// A pool's handle on a worker: the worker (while envs use it) and its process id.
type PooledWorker = (Weak<Mutex<EnvWorker>>, u32);

impl GymEnvPool {
    /// A pool for `settings`; no worker starts before [`GymEnvPool::make`].
    pub fn new(settings: GymSettings) -> Self {
        GymEnvPool { settings, workers: Mutex::new(HashMap::new()) }
    }

    /// The settings.
    pub fn settings(&self) -> &GymSettings {
        &self.settings
    }

    /// Env `env_index` of incarnation `incarnation` of runner `runner_index`. The first env of
    /// each group of `envs_per_worker` starts a worker for the group; the others join it.
    pub fn make(&self, runner_index: usize, incarnation: u64, env_index: usize) -> Result<GymEnv> {
        let (worker, slot) = self.worker_for(runner_index, incarnation, env_index)?;
        let guard = worker.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.agents().is_some() {
            return Err(GymError::WrongKind {
                env: self.settings.env.clone(),
                found: "a multi-agent env",
                fix: "train it as one (`Impala` and `impala train` take either kind of env)",
            });
        }
        let spec = guard.spec().clone();
        drop(guard);
        Ok(GymEnv {
            worker,
            slot,
            spec,
            stepping: false,
            reset_done: false,
            episode_continues: false,
            info: Vec::new(),
            reset_info: Vec::new(),
        })
    }

    /// Multi-agent env `env_index` of incarnation `incarnation` of runner `runner_index`
    /// (PettingZoo's parallel or AEC envs, or RLlib's `MultiAgentEnv` API), its workers shared
    /// as [`GymEnvPool::make`] shares them.
    pub fn make_multi_agent(
        &self,
        runner_index: usize,
        incarnation: u64,
        env_index: usize,
    ) -> Result<GymMultiAgentEnv> {
        let (worker, index) = self.worker_for(runner_index, incarnation, env_index)?;
        GymMultiAgentEnv::new(worker, index, &self.settings.env)
    }

    /// The worker hosting env `env_index` of a runner's incarnation, and the env's index there.
    fn worker_for(
        &self,
        runner_index: usize,
        incarnation: u64,
        env_index: usize,
    ) -> Result<(Arc<Mutex<EnvWorker>>, usize)> {
        let per_worker = self.settings.envs_per_worker.get();
        let (group, slot) = (env_index / per_worker, env_index % per_worker);
        let key = (std::thread::current().id(), runner_index, incarnation, group);
        let mut workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.retain(|_, (w, _)| w.strong_count() > 0);
        let existing = workers.get(&key).and_then(|(w, _)| w.upgrade()).filter(|w| {
            let w = w.lock().unwrap_or_else(PoisonError::into_inner);
            slot > 0 && slot < w.count()
        });
        let (worker, slot) = match existing {
            Some(worker) => (worker, slot),
            None => {
                // Also when an env is built without its group's first env: it takes slot 0.
                let count = (self.settings.num_envs.get().saturating_sub(group * per_worker))
                    .clamp(1, per_worker);
                let spawned = EnvWorker::spawn(&self.settings, count)?;
                let pid = spawned.pid();
                let worker = Arc::new(Mutex::new(spawned));
                workers.insert(key, (Arc::downgrade(&worker), pid));
                (worker, 0)
            }
        };
        Ok((worker, slot))
    }

    /// Kills (SIGKILL) the worker processes whose envs are still in use, with their process
    /// groups (what their envs forked): what stopping does after its grace, when a runner is
    /// stuck in an env step (a hung env is not awaited for `sample_timeout_s`). The runner then
    /// sees the worker exit and ends with an error. Workers whose envs were dropped have exited
    /// already and are left alone.
    pub fn kill_workers_in_use(&self) {
        let workers = self.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for (worker, pid) in workers.values() {
            if worker.strong_count() > 0 {
                if let Some(leads_group) = own_child(*pid) {
                    kill(*pid, leads_group);
                }
            }
        }
    }

    /// The env's spec, from a worker with one env that stops at once.
    pub fn probe(&self) -> Result<EnvSpec> {
        match self.probe_kind()? {
            EnvKind::Single(spec) => Ok(spec),
            EnvKind::Multi(_) => Err(GymError::WrongKind {
                env: self.settings.env.clone(),
                found: "a multi-agent env",
                fix: "train it as one (`Impala` and `impala train` take either kind of env)",
            }),
        }
    }

    /// What the env is, from a worker with one env that stops at once: one agent's spec, or a
    /// multi-agent env's agents.
    pub fn probe_kind(&self) -> Result<EnvKind> {
        let worker = EnvWorker::spawn(&self.settings, 1)?;
        Ok(match worker.agents() {
            Some(agents) => EnvKind::Multi(agents.clone()),
            None => EnvKind::Single(worker.spec().clone()),
        })
    }
}

/// What a Python env is ([`GymEnvPool::probe_kind`]).
#[derive(Debug, Clone, PartialEq)]
pub enum EnvKind {
    /// A single-agent env and its spec.
    Single(EnvSpec),
    /// A multi-agent env and its agents.
    Multi(MultiAgentSpec),
}

/// One Python env, hosted by an env worker process (see the crate docs).
#[derive(Debug)]
pub struct GymEnv {
    worker: Arc<Mutex<EnvWorker>>,
    slot: usize,
    spec: EnvSpec,
    /// A step was begun and its reply not yet taken.
    stepping: bool,
    /// The last step ended the episode and the worker already reset the env: the next
    /// `reset(None)` takes the first observation from shared memory, with no round trip.
    reset_done: bool,
    /// The last step ended the episode for learning only (see [`Env::episode_continues`]).
    episode_continues: bool,
    /// The info of the current observation ([`Env::info`]; only with
    /// [`GymSettings::record_infos`]).
    info: Vec<u8>,
    /// The info of the reset the worker did in the step that ended the episode, which
    /// becomes [`GymEnv::info`] at the `reset` that takes its observation.
    reset_info: Vec<u8>,
}

impl GymEnv {
    /// The process id of the worker hosting this env.
    pub fn worker_pid(&self) -> u32 {
        self.worker().pid()
    }

    fn worker(&self) -> std::sync::MutexGuard<'_, EnvWorker> {
        self.worker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn outcome(&mut self, reply: Reply, obs: &mut [f32]) -> Result<StepOutcome> {
        match reply {
            Reply::Ok { reward, terminated, truncated, reset, continues, infos, .. } => {
                let Infos { info, reset_info } = *infos;
                (self.info, self.reset_info) = (info, reset_info);
                let mut worker = self.worker();
                if reset {
                    worker.read_final_obs(self.slot, obs);
                } else {
                    worker.read_obs(self.slot, obs);
                }
                drop(worker);
                self.reset_done = reset;
                self.episode_continues = continues && terminated;
                Ok(StepOutcome { reward, terminated, truncated })
            }
            Reply::Failed { message, recreated: true } => {
                tracing::warn!(
                    "env `{}` raised in Python ({message}); recreated it \
                     (restart_failed_sub_environments) and ended its episode",
                    self.spec.id
                );
                // The row still holds the last observation the env returned.
                self.worker().read_obs(self.slot, obs);
                self.info.clear();
                Ok(StepOutcome { reward: 0.0, terminated: false, truncated: true })
            }
            Reply::Failed { message, recreated: false } => {
                Err(GymError::EnvFailed { env: self.spec.id.clone(), message })
            }
        }
    }
}

impl Env for GymEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> impala_core::Result<()> {
        let slot = self.slot;
        if std::mem::take(&mut self.reset_done) && seed.is_none() && !self.stepping {
            // The worker reset the env in the step that ended its episode, as an unseeded
            // reset here would have.
            self.worker().read_obs(slot, obs);
            self.info = std::mem::take(&mut self.reset_info);
            return Ok(());
        }
        let stale = std::mem::take(&mut self.stepping);
        let mut worker = self.worker();
        if stale {
            // A step begun before an error elsewhere: its reply is stale.
            worker.wait(slot, "finish a step")?;
        }
        worker.reset(slot, seed)?;
        let reply = worker.wait(slot, "reset")?;
        drop(worker);
        match reply {
            Reply::Ok { infos, .. } => {
                self.worker().read_obs(slot, obs);
                self.info = infos.info;
                Ok(())
            }
            Reply::Failed { message, .. } => {
                Err(GymError::EnvFailed { env: self.spec.id.clone(), message }.into())
            }
        }
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> impala_core::Result<StepOutcome> {
        self.begin_step(action)?;
        self.finish_step(obs)
    }

    fn steps_elsewhere(&self) -> bool {
        true
    }

    fn episode_continues(&self) -> bool {
        self.episode_continues
    }

    fn info(&self) -> &[u8] {
        &self.info
    }

    fn begin_step(&mut self, action: &[f32]) -> impala_core::Result<()> {
        // Box actions out of bounds are clipped by the worker; wrong sizes, non-finite values
        // and invalid indices are refused here.
        self.spec.action_space.check_action(action)?;
        let slot = self.slot;
        self.worker().begin_step(slot, action)?;
        self.stepping = true;
        self.reset_done = false;
        self.episode_continues = false;
        Ok(())
    }

    fn flush_steps(&mut self) -> impala_core::Result<()> {
        Ok(self.worker().flush_steps()?)
    }

    fn finish_step(&mut self, obs: &mut [f32]) -> impala_core::Result<StepOutcome> {
        if !std::mem::take(&mut self.stepping) {
            return Err(CoreError::Env {
                env: self.spec.id.clone(),
                reason: "finish_step without a step begun by begin_step".into(),
            });
        }
        let reply = self.worker().wait(self.slot, "step")?;
        Ok(self.outcome(reply, obs)?)
    }
}

/// Whether `pid` is a child of this process (a worker that was reaped could have its pid
/// reused by an unrelated process, which must not be signalled), and if so whether it leads
/// its process group (workers do).
fn own_child(pid: u32) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`: the fields after the last `)`.
    let mut fields = stat.rsplit(')').next()?.split_whitespace().skip(1);
    let mut next = || fields.next().and_then(|f| f.parse::<u32>().ok());
    let (ppid, pgrp) = (next(), next());
    (ppid == Some(std::process::id())).then_some(pgrp == Some(pid))
}

/// SIGKILLs `pid`, and its process group if it leads one.
#[cfg(unix)]
fn kill(pid: u32, leads_group: bool) {
    use rustix::process::{kill_process, kill_process_group, Pid, Signal};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        if leads_group {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = kill_process(pid, Signal::KILL);
    }
}

#[cfg(not(unix))]
fn kill(_pid: u32, _leads_group: bool) {}
