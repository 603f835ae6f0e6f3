//! The memory and the runner threads a run will hold, checked against the machine before
//! anything samples: a setting the machine cannot hold is refused with the arithmetic, one that
//! takes more than half of its memory is warned about.

use impala_config::ValidatedConfig;
use impala_core::{gib, machine_memory_bytes, machine_thread_room, EnvSpec, Space};

use crate::{ImpalaError, Result};

/// Bytes one env step takes in a sample batch: its observation (bytes or float32), action and
/// distribution inputs, and the per-step floats (log-prob, value, reward, truncation value)
/// and flags.
fn step_bytes(spec: &EnvSpec) -> u64 {
    let per_value = if matches!(spec.observation_space, Space::Bytes { .. }) { 1 } else { 4 };
    let obs = spec.observation_space.flat_dim() as u64 * per_value;
    let action = (spec.action_space.flat_dim() + spec.action_space.dist_inputs_dim()) as u64;
    obs + 4 * (action + 4) + 2
}

/// What one policy adds to a run: its data and its copies on the env runners. A single-agent
/// run is one share of one agent per env.
pub(crate) struct PolicyShare<'a> {
    /// The config the policy trains with (its `policy_config` applied).
    pub config: &'a ValidatedConfig,
    /// Its agents' spaces.
    pub spec: &'a EnvSpec,
    /// Agents per env that map to it: each adds its steps to every fragment.
    pub agents_per_env: u64,
    /// Its model's parameters.
    pub params: u64,
    /// Whether its batches are queued and trained (`policies_to_train`).
    pub trained: bool,
}

/// Checks what `config` makes the run hold for its policies' `shares`: fragments being sampled
/// and in flight, train batches queued, replayed and trained, and every env runner's policy
/// copies.
pub(crate) fn check_memory(config: &ValidatedConfig, shares: &[PolicyShare<'_>]) -> Result<()> {
    warn_of_many_envs(config);
    let c = config.config();
    let Some(memory) = machine_memory_bytes() else {
        return Ok(());
    };
    let runners = c.num_env_runners.max(1) as u64;
    // In flight per runner, plus the fragment it is building.
    let fragments = runners.saturating_mul(c.max_requests_in_flight_per_sampler_worker as u64 + 1);
    let fragment_steps = c.sample_batch_size() as u64;
    let (mut sampling, mut training, mut params) = (0u64, 0u64, 0u64);
    let (mut batches, mut batch_steps, mut agents, mut trained) = (0u64, 0u64, 0u64, 0usize);
    let mut step_sizes = Vec::with_capacity(shares.len());
    for share in shares {
        let p = share.config.config();
        let step = step_bytes(share.spec);
        step_sizes.push(step.to_string());
        agents = agents.saturating_add(share.agents_per_env);
        let fragment = fragment_steps.saturating_mul(share.agents_per_env);
        sampling = sampling.saturating_add(fragments.saturating_mul(fragment).saturating_mul(step));
        params = params.saturating_add(share.params);
        if share.trained {
            // Queued, replayed, and the one being built, loaded and trained.
            let queued = (p.learner_queue_size + p.replay_buffer_num_slots) as u64 + 3;
            // A train batch holds whole sample batches (at least one).
            let steps = p.total_train_batch_size().max(p.sample_batch_size()) as u64;
            training = training.saturating_add(queued.saturating_mul(steps).saturating_mul(step));
            batches = batches.max(queued);
            batch_steps = batch_steps.max(steps);
            trained += 1;
        }
    }
    // Each runner's policies (their weights and the snapshots they load them from), and its
    // thread and state.
    let policies = runners
        .saturating_mul(params)
        .saturating_mul(8)
        .saturating_add(runners.saturating_mul(RUNNER_BYTES));
    let total = sampling.saturating_add(training).saturating_add(policies);
    if total <= memory / 2 {
        return Ok(());
    }
    // Several policies: fragments hold every agent's steps, and the batch counts and sizes are
    // the largest of any trained policy's.
    let (each_agent, each_policy, most, step) = match &step_sizes[..] {
        [one] => (String::new(), String::new(), "", format!("{one} bytes a step")),
        _ => (
            format!(" for each of {agents} agents"),
            format!(" per policy ({trained} policies)"),
            ", the most of any policy",
            format!("bytes a step per policy: {}", step_sizes.join(", ")),
        ),
    };
    let detail = format!(
        "{fragments} fragments ({runners} env runners x (max_requests_in_flight_per_env_runner \
         {} + 1)) of {fragment_steps} steps{each_agent} (rollout_fragment_length x \
         num_envs_per_env_runner) = {:.1} GiB; {batches} train batches{each_policy} \
         (learner_queue_size + replay_buffer_num_slots + 3{most}) of {batch_steps} steps \
         (train_batch_size, at least one sample batch{most}) = {:.1} GiB; \
         {runners} policy copies of {params} parameters and runner states of {} KiB = \
         {:.1} GiB; {step}",
        c.max_requests_in_flight_per_sampler_worker,
        gib(sampling),
        gib(training),
        RUNNER_BYTES / 1024,
        gib(policies),
    );
    if total > memory {
        return Err(ImpalaError::MemoryBudget {
            needed_gib: gib(total),
            memory_gib: gib(memory),
            detail,
        });
    }
    tracing::warn!(
        "the run will hold about {:.1} GiB, more than half of this machine's {:.1} GiB: {detail}",
        gib(total),
        gib(memory)
    );
    Ok(())
}

/// What an env runner holds besides its fragments and policy weights: its thread, channels and
/// counters (2,000 CartPole runners held 490 MB at peak, 5,000 held 1,010 MB: about 175 KiB
/// each, rounded up).
const RUNNER_BYTES: u64 = 256 * 1024;

/// Threads a run starts besides its env runners': the learner, the driver, aggregation,
/// signals and the libraries' pools, rounded up.
const OTHER_THREADS: u64 = 64;

/// Runner threads per core beyond which the driver and the learner, two threads among them all,
/// get too small a share of the CPU to train or even to stop: with 10,000 runners on 2 cores,
/// telling them to stop took the driver 54 s and the run never ended; 2,000 ended in 6.5 s.
const RUNNER_THREADS_PER_CORE: u64 = 512;

/// Refuses more env runner threads (and evaluation runner threads) than the machine can start,
/// or than its cores can schedule beside the driver, with the arithmetic; runners in other
/// processes are not counted.
pub(crate) fn check_threads(config: &ValidatedConfig) -> Result<()> {
    let c = config.config();
    let runners = c.num_env_runners as u64 + c.evaluation_num_env_runners as u64;
    let threads = format!(
        "num_env_runners {} + evaluation_num_env_runners {}",
        c.num_env_runners, c.evaluation_num_env_runners
    );
    let fix = "lower num_env_runners (each runner steps num_envs_per_env_runner envs; more envs \
               per runner sample as much with fewer threads), or serve remote env runners";
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let most = RUNNER_THREADS_PER_CORE.saturating_mul(cores);
    if runners > most {
        return Err(ImpalaError::ImpossibleResources {
            reason: format!(
                "{runners} env runner threads ({threads}) on {cores} cores, more than \
                 {RUNNER_THREADS_PER_CORE} per core ({most}): the driver and the learner would \
                 get about 1/{runners} of the CPU each, too little to train or to stop"
            ),
            fix: fix.into(),
        });
    }
    let Some(room) = machine_thread_room() else {
        return Ok(());
    };
    let needed = runners.saturating_add(OTHER_THREADS);
    if needed <= room.free() {
        return Ok(());
    }
    Err(ImpalaError::ImpossibleResources {
        reason: format!(
            "{needed} threads ({threads} + about {OTHER_THREADS} others) but this machine can \
             start {} more ({} {} less {} running)",
            room.free(),
            room.limit_name,
            room.limit,
            room.in_use
        ),
        fix: fix.into(),
    })
}

/// Envs per core above which a run is told it will wait long for its first train batch.
const MANY_ENVS_PER_CORE: u64 = 1024;

/// Warns when the env runners step so many envs that one fragment each takes a long time on
/// this machine's cores (100,000 envs on one runner sampled nothing for 20 s).
fn warn_of_many_envs(config: &ValidatedConfig) {
    let c = config.config();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let runners = c.num_env_runners.max(1) as u64;
    let envs = runners.saturating_mul(c.num_envs_per_env_runner as u64);
    if envs > MANY_ENVS_PER_CORE.saturating_mul(cores) {
        let steps = envs.saturating_mul(c.rollout_fragment_length as u64);
        tracing::warn!(
            "{envs} envs ({runners} env runners x num_envs_per_env_runner {}) on {cores} \
             cores: every round of fragments is {steps} env steps (x rollout_fragment_length \
             {}) before the first train batch; fewer envs per runner sample sooner",
            c.num_envs_per_env_runner,
            c.rollout_fragment_length
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_runners(num_env_runners: usize) -> ValidatedConfig {
        let config = impala_config::ImpalaConfig { num_env_runners, ..Default::default() };
        config.validate().map_err(|e| e.to_string()).expect("a valid config")
    }

    #[test]
    fn runner_threads_beyond_what_the_cores_can_schedule_are_refused_with_the_arithmetic() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let most = RUNNER_THREADS_PER_CORE as usize * cores;
        assert!(check_threads(&with_runners(most)).is_ok());
        let err = check_threads(&with_runners(most + 1)).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        for needle in ["num_env_runners", &format!("{cores} cores"), "per core", "lower"] {
            assert!(err.contains(needle), "`{needle}` not in: {err}");
        }
    }
}
