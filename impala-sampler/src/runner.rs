//! One env runner: `num_envs_per_env_runner` environments and one policy copy, stepped together.

use impala_profile::{span, Activity};
use std::sync::Arc;

use impala_core::{
    AgentRecord, CoreError, EnvActions, EnvSpec, EpisodeRecord, EpisodeStats, Policy, PolicyInput,
    PolicyOutput, SampleBatch, Weights,
};
use impala_envs::VectorEnv;

use crate::{EnvContext, EnvFactory, EnvRunnerSettings, PolicyFactory, Result, SamplerError};

/// One sample result from a runner: `num_envs_per_env_runner` rows of `rollout_fragment_length`
/// steps (RLlib's `RolloutWorker.sample()` output).
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    /// The runner that sampled it (0 = local runner).
    pub runner_id: usize,
    /// The rows, time-major.
    pub batch: SampleBatch,
    /// Episodes that ended during this fragment.
    pub episodes: Vec<EpisodeStats>,
    /// The same episodes step by step, in the same order, when the runner records them
    /// ([`EnvRunnerSettings::record_episodes`]); empty otherwise.
    pub episode_records: Vec<EpisodeRecord>,
}

/// RLlib's `RolloutWorker` / `SingleAgentEnvRunner`: owns `num_envs_per_env_runner` envs and one
/// policy copy, steps all envs with one batched inference call per step and returns time-major
/// fragments. The group gives it new weights between fragments ([`EnvRunner::set_weights`]).
///
/// Per step it writes straight into the fragment's buffers; the only allocations are the
/// fragment itself (once per fragment) and the values of truncated episodes' final observations.
///
/// Episode bookkeeping follows DESIGN.md: at a truncation (the env's or the spec's time limit,
/// without termination) the behaviour value of the episode's final observation goes into
/// `truncation_values[t, b]`; recurrent state is carried across steps and fragments and zeroed
/// when an episode starts; `state_in` holds each row's starting state.
///
/// With [`EnvRunnerSettings::record_episodes`] it also keeps every episode step by step and
/// hands each complete one over in the fragment where it ends ([`Fragment::episode_records`]):
/// RLlib's episode callbacks look at whole episodes, and the rows of a fragment cut them at
/// fragment boundaries (and clip rewards). Off, it costs one branch per step.
///
/// ```
/// use std::sync::Arc;
/// use std::num::NonZeroUsize;
/// use impala_core::{CoreError, Env, EnvSpec, Space, StepOutcome};
/// use impala_sampler::{EnvFactory, EnvRunner, EnvRunnerSettings, PolicyFactory, RandomPolicy};
///
/// /// A corridor: the episode terminates after 3 steps.
/// struct Corridor { spec: EnvSpec, pos: usize }
/// impl Env for Corridor {
///     fn spec(&self) -> &EnvSpec { &self.spec }
///     fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
///         self.pos = 0;
///         obs[0] = 0.0;
///         Ok(())
///     }
///     fn step(&mut self, _action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
///         self.pos += 1;
///         obs[0] = self.pos as f32;
///         Ok(StepOutcome { reward: 1.0, terminated: self.pos == 3, truncated: false })
///     }
/// }
///
/// let spec = EnvSpec {
///     id: "Corridor".into(),
///     observation_space: Space::continuous(vec![0.0], vec![3.0])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let env_spec = spec.clone();
/// let env_factory: EnvFactory =
///     Arc::new(move |_ctx| Ok(Box::new(Corridor { spec: env_spec.clone(), pos: 0 }) as Box<dyn Env>));
/// let policy_factory: PolicyFactory = Arc::new(move |id| {
///     Ok(Box::new(RandomPolicy::new(&spec, id as u64)) as Box<dyn impala_core::Policy>)
/// });
/// let settings = EnvRunnerSettings {
///     num_envs: NonZeroUsize::new(2).ok_or("zero")?,
///     rollout_fragment_length: NonZeroUsize::new(4).ok_or("zero")?,
///     ..EnvRunnerSettings::default()
/// };
/// let mut runner = EnvRunner::new(&settings, 0, &env_factory, &policy_factory)?;
/// let fragment = runner.sample()?;
/// assert_eq!(fragment.batch.env_steps(), 8);
/// assert_eq!(fragment.episodes.len(), 2); // each env finished one 3-step episode
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "RolloutWorker")]
#[doc(alias = "SingleAgentEnvRunner")]
pub struct EnvRunner {
    runner_id: usize,
    /// One group of envs, or two where the envs step elsewhere (see [`EnvGroup`]).
    groups: Vec<EnvGroup>,
    num_envs: usize,
    policy: Box<dyn Policy>,
    spec: EnvSpec,
    fragment_len: usize,
    clip_rewards: Option<f64>,
    env_actions: EnvActions,
    explore: bool,
    obs_dim: usize,
    state_dim: usize,
    /// The current recurrent state of every env, `[B, state_dim]`.
    state: Vec<f32>,
    /// Rows truncated at the current step, with their final observations and states.
    truncated_rows: Vec<usize>,
    final_obs: Vec<f32>,
    final_state: Vec<f32>,
    /// Whether the envs were reset once (the first fragment resets them, seeded).
    started: bool,
    /// The next fragment with its first step acted and begun: a runner whose envs step
    /// elsewhere begins it as each group finishes the current fragment's last step, so its
    /// workers step while the fragment is handed over (see [`EnvRunner::sample`]).
    next: Option<SampleBatch>,
    /// With [`EnvRunnerSettings::record_episodes`], each env's episode so far.
    records: Option<Vec<AgentRecord>>,
}

impl std::fmt::Debug for EnvRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvRunner")
            .field("runner_id", &self.runner_id)
            .field("env", &self.spec.id)
            .field("num_envs", &self.num_envs)
            .field("groups", &self.groups.len())
            .field("fragment_len", &self.fragment_len)
            .finish_non_exhaustive()
    }
}

impl EnvRunner {
    /// Builds runner `runner_id` (0 = local) at its first start (incarnation 0):
    /// `settings.num_envs` envs from `env_factory`, vectorised with auto-reset, and one policy
    /// from `policy_factory`. All envs must share their spaces. Time limits are the envs' own
    /// (`impala_envs::make` adds `TimeLimit`).
    pub fn new(
        settings: &EnvRunnerSettings,
        runner_id: usize,
        env_factory: &EnvFactory,
        policy_factory: &PolicyFactory,
    ) -> Result<Self> {
        Self::build(settings, runner_id, 0, env_factory, |ctx| policy_factory(ctx.runner_index))
    }

    /// Builds incarnation `incarnation` of runner `runner_id` (0 = its first start; every
    /// restart bumps it). Its envs get [`EnvContext::for_incarnation`] contexts, so a restarted
    /// runner draws new env streams; `make_policy` gets the runner's context (that of its env
    /// 0: runner index, incarnation, seed), so it can seed action sampling per incarnation too.
    pub fn build(
        settings: &EnvRunnerSettings,
        runner_id: usize,
        incarnation: u64,
        env_factory: &EnvFactory,
        make_policy: impl FnOnce(&EnvContext) -> std::result::Result<Box<dyn Policy>, CoreError>,
    ) -> Result<Self> {
        let num_envs = settings.num_envs.get();
        let context = |env_index| {
            EnvContext::for_incarnation(
                runner_id,
                incarnation,
                env_index,
                settings.seed,
                settings.env_config.clone(),
            )
        };
        let mut envs = Vec::with_capacity(num_envs);
        for env_index in 0..num_envs {
            envs.push(env_factory(&context(env_index))?);
        }
        // Envs that step in worker processes form two groups: one steps while the runner
        // infers for the other.
        let split = num_envs >= 2 && envs.iter().all(|e| e.steps_elsewhere());
        let second = split.then(|| envs.split_off(num_envs / 2));
        // VectorEnv seeds env i with `seed + i` on its first reset: with env 0's seed that is
        // exactly each env's `EnvContext::seed`.
        let runner_context = context(0);
        let seed = runner_context.seed;
        let ad = envs[0].spec().action_space.flat_dim();
        let mut groups = vec![EnvGroup::new(VectorEnv::new(envs, seed)?, 0, ad)];
        if let Some(second) = second {
            let first_row = num_envs / 2;
            let seed = seed.map(|s| s.wrapping_add(first_row as u64));
            groups.push(EnvGroup::new(VectorEnv::new(second, seed)?, first_row, ad));
        }
        let spec = groups[0].envs.envs()[0].spec().clone();
        let policy = make_policy(&runner_context)?;
        let state_dim = policy.state_dim();
        let template = SampleBatch::zeros(1, 1, &spec.observation_space, &spec.action_space, 0);
        let obs_dim = template.obs_dim();
        Ok(EnvRunner {
            runner_id,
            groups,
            num_envs,
            policy,
            fragment_len: settings.rollout_fragment_length.get(),
            clip_rewards: settings.clip_rewards,
            env_actions: EnvActions::new(
                &spec.action_space,
                settings.normalize_actions,
                settings.clip_actions,
            ),
            explore: settings.explore,
            obs_dim,
            state_dim,
            state: vec![0.0; num_envs * state_dim],
            truncated_rows: Vec::with_capacity(num_envs),
            final_obs: vec![0.0; num_envs * obs_dim],
            final_state: vec![0.0; num_envs * state_dim],
            started: false,
            next: None,
            records: settings
                .record_episodes
                .then(|| vec![AgentRecord::new(0, &spec.observation_space); num_envs]),
            spec,
        })
    }

    /// The environments' spec.
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// This runner's id (0 = local).
    pub fn runner_id(&self) -> usize {
        self.runner_id
    }

    /// Acts with `weights` from the next fragment on.
    pub fn set_weights(&mut self, weights: &Arc<Weights>) -> Result<()> {
        Ok(self.policy.set_weights(weights)?)
    }

    /// The version of the weights the policy acts with now.
    pub fn weights_version(&self) -> u64 {
        self.policy.weights_version()
    }

    /// Steps every env `rollout_fragment_length` times and returns the fragment.
    pub fn sample(&mut self) -> Result<Fragment> {
        let _building = span(Activity::FragmentBuild);
        if !self.started {
            let _stepping = span(Activity::EnvStep);
            for group in &mut self.groups {
                group.envs.reset()?;
            }
            self.started = true;
        }
        let mut batch = match self.next.take() {
            Some(batch) => batch,
            None => {
                let mut batch = self.new_batch();
                for g in 0..self.groups.len() {
                    self.act(g, 0, &mut batch)?;
                }
                batch
            }
        };
        let mut episodes = Vec::new();
        let mut episode_records = Vec::new();
        // With two groups, one group's step runs in its workers while the runner finishes the
        // other's and infers its next actions. Across fragments too: as each group finishes
        // the last step, it acts the next fragment's first, so the workers never wait for the
        // hand-over (those first actions use the weights of this fragment, and the next
        // fragment says so in its weights_version). Envs stepped by this thread gain nothing
        // from that and act each fragment with the weights it starts with.
        let overlap = self.groups.len() > 1;
        let mut next = None;
        for t in 0..self.fragment_len {
            for g in 0..self.groups.len() {
                self.finish(g, t, &mut batch, &mut episodes, &mut episode_records)?;
                if t + 1 < self.fragment_len {
                    self.act(g, t + 1, &mut batch)?;
                } else if overlap {
                    let mut next_batch = next.take().unwrap_or_else(|| self.new_batch());
                    self.act(g, 0, &mut next_batch)?;
                    next = Some(next_batch);
                }
            }
        }
        for group in &self.groups {
            batch.bootstrap_obs.write(group.first_row * self.obs_dim, group.envs.obs());
        }
        if let Some(next) = next.as_mut() {
            // The state every row carries into the next fragment (final only now).
            next.state_in.copy_from_slice(&self.state);
        }
        self.next = next;
        Ok(Fragment { runner_id: self.runner_id, batch, episodes, episode_records })
    }

    /// A fragment's empty batch, starting from the current recurrent state and weights.
    fn new_batch(&self) -> SampleBatch {
        let mut batch = SampleBatch::zeros(
            self.fragment_len,
            self.num_envs,
            &self.spec.observation_space,
            &self.spec.action_space,
            self.state_dim,
        );
        batch.state_in.copy_from_slice(&self.state);
        batch.weights_version.fill(self.policy.weights_version());
        batch
    }

    /// Infers group `g`'s actions for step `t`, records them in `batch` and begins the step.
    fn act(&mut self, g: usize, t: usize, batch: &mut SampleBatch) -> Result<()> {
        let (od, sd) = (self.obs_dim, self.state_dim);
        let ad = self.spec.action_space.flat_dim();
        let dd = self.spec.action_space.dist_inputs_dim();
        let group = &mut self.groups[g];
        let (n, first) = (group.envs.num_envs(), group.first_row);
        let input = PolicyInput {
            obs: group.envs.obs(),
            num_envs: n,
            state: &self.state[first * sd..(first + n) * sd],
            explore: self.explore,
        };
        {
            let _inferring = span(Activity::Inference);
            self.policy.compute_actions(&input, &mut group.out)?;
        }
        group.check_output(&self.spec, sd)?;
        let row = t * self.num_envs + first;
        let rows = |w: usize| row * w..(row + n) * w;
        batch.obs.write(row * od, group.envs.obs());
        batch.actions[rows(ad)].copy_from_slice(&group.out.actions);
        batch.action_logp[rows(1)].copy_from_slice(&group.out.action_logp);
        batch.action_dist_inputs[rows(dd)].copy_from_slice(&group.out.action_dist_inputs);
        batch.vf_preds[rows(1)].copy_from_slice(&group.out.vf_preds);
        if let Some(records) = self.records.as_mut() {
            let observed = group.envs.obs().chunks_exact(od);
            let acted = group.out.actions.chunks_exact(ad);
            for (b, ((record, obs), action)) in
                records[first..first + n].iter_mut().zip(observed).zip(acted).enumerate()
            {
                record.observe(obs, group.envs.info(b));
                record.act(action);
            }
        }
        let actions = if self.env_actions.is_identity() {
            &group.out.actions
        } else {
            group.env_actions.copy_from_slice(&group.out.actions);
            self.env_actions.apply(&mut group.env_actions);
            &group.env_actions
        };
        let _stepping = span(Activity::EnvStep);
        group.envs.begin_step(actions)?;
        Ok(())
    }

    /// Finishes group `g`'s step `t`: rewards, flags, episodes (and their records), recurrent
    /// state and the values of truncated episodes' final observations.
    fn finish(
        &mut self,
        g: usize,
        t: usize,
        batch: &mut SampleBatch,
        episodes: &mut Vec<EpisodeStats>,
        episode_records: &mut Vec<EpisodeRecord>,
    ) -> Result<()> {
        let (od, sd) = (self.obs_dim, self.state_dim);
        let group = &mut self.groups[g];
        let (n, first) = (group.envs.num_envs(), group.first_row);
        let row = t * self.num_envs + first;
        let step = {
            let _stepping = span(Activity::EnvStep);
            group.envs.finish_step()?
        };
        self.truncated_rows.clear();
        for b in 0..n {
            let i = row + b;
            let terminated = step.terminateds[b];
            let truncated = step.truncateds[b] && !terminated;
            batch.rewards[i] = match self.clip_rewards {
                Some(c) => step.rewards[b].clamp(-c, c) as f32,
                None => step.rewards[b] as f32,
            };
            batch.terminateds[i] = terminated;
            batch.truncateds[i] = truncated;
            if truncated {
                let k = self.truncated_rows.len();
                self.final_obs[k * od..(k + 1) * od]
                    .copy_from_slice(&step.final_obs[b * od..(b + 1) * od]);
                self.final_state[k * sd..(k + 1) * sd]
                    .copy_from_slice(&group.out.state_out[b * sd..(b + 1) * sd]);
                self.truncated_rows.push(b);
            }
        }
        // Carry the recurrent state; episodes that just ended start the next one from zero (as
        // the learner's unroll does at every terminated or truncated step, also where the
        // game goes on: `Env::episode_continues`).
        let state = &mut self.state[first * sd..(first + n) * sd];
        state.copy_from_slice(&group.out.state_out);
        for b in (0..n).filter(|&b| step.done(b)) {
            state[b * sd..(b + 1) * sd].fill(0.0);
        }
        episodes.extend(step.episodes.iter().map(|(_, stats)| *stats));
        if let Some(records) = self.records.as_mut() {
            let records = &mut records[first..first + n];
            for (record, &reward) in records.iter_mut().zip(&step.rewards) {
                record.reward(reward);
            }
            for &(b, stats) in &step.episodes {
                // An episode's last observation is the one that ended it, not the next
                // episode's first, which the next act records.
                let fresh = records[b].sized_like();
                let mut record = std::mem::replace(&mut records[b], fresh);
                record.observe(step.final_obs(b).unwrap_or_default(), &step.final_infos[b]);
                episode_records.push(EpisodeRecord {
                    runner_id: self.runner_id,
                    env_index: first + b,
                    agents: vec![record],
                    stats,
                });
            }
        }
        if !self.truncated_rows.is_empty() {
            let k = self.truncated_rows.len();
            let _inferring = span(Activity::Inference);
            let values = self.policy.compute_values(
                &self.final_obs[..k * od],
                k,
                &self.final_state[..k * sd],
            )?;
            if values.len() != k {
                return Err(SamplerError::PolicyOutput {
                    what: "compute_values",
                    expected: k,
                    got: values.len(),
                });
            }
            for (&b, v) in self.truncated_rows.iter().zip(values) {
                batch.truncation_values[row + b] = v;
            }
        }
        Ok(())
    }
}

/// Some of a runner's envs, stepped as one vector env with their own policy output. A runner
/// whose envs step elsewhere (Python worker processes) splits them into two groups and infers
/// for one while the other steps (Sample Factory's double-buffered sampling); its batches are
/// the same rows, one group's after the other's.
struct EnvGroup {
    envs: VectorEnv,
    /// The group's first row among the runner's `B` rows.
    first_row: usize,
    out: PolicyOutput,
    /// Scratch for the env's actions (normalised or clipped), `[n, action_dim]`.
    env_actions: Vec<f32>,
}

impl EnvGroup {
    fn new(envs: VectorEnv, first_row: usize, action_dim: usize) -> Self {
        let env_actions = vec![0.0; envs.num_envs() * action_dim];
        EnvGroup { envs, first_row, out: PolicyOutput::default(), env_actions }
    }

    fn check_output(&self, spec: &EnvSpec, state_dim: usize) -> Result<()> {
        let b = self.envs.num_envs();
        let out = &self.out;
        let checks = [
            ("actions", b * spec.action_space.flat_dim(), out.actions.len()),
            ("action_logp", b, out.action_logp.len()),
            (
                "action_dist_inputs",
                b * spec.action_space.dist_inputs_dim(),
                out.action_dist_inputs.len(),
            ),
            ("vf_preds", b, out.vf_preds.len()),
            ("state_out", b * state_dim, out.state_out.len()),
        ];
        for (what, expected, got) in checks {
            if expected != got {
                return Err(SamplerError::PolicyOutput { what, expected, got });
            }
        }
        Ok(())
    }
}
