//! `ImpalaConfig`: every option of RLlib's IMPALA with RLlib's default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use impala_core::{GradClipBy, LossReduction, OptType, Precision, Schedule};

use crate::model::ModelConfig;
use crate::multi_agent::CountStepsBy;

/// How Ray places the resource bundles (`placement_strategy`); impala-rs runs on one machine and
/// only reports it in the resource request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PlacementStrategy {
    /// All bundles on as few nodes as possible.
    #[default]
    Pack,
    /// Bundles spread over nodes.
    Spread,
    /// All bundles on one node, or fail.
    StrictPack,
    /// Every bundle on its own node, or fail.
    StrictSpread,
}

impl PlacementStrategy {
    /// RLlib's spelling (`"PACK"`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementStrategy::Pack => "PACK",
            PlacementStrategy::Spread => "SPREAD",
            PlacementStrategy::StrictPack => "STRICT_PACK",
            PlacementStrategy::StrictSpread => "STRICT_SPREAD",
        }
    }
}

/// Where env runners run (`env_runner_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EnvRunnerBackend {
    /// Threads of this process (or `impala env-runner` processes that connect to a server).
    #[default]
    Threads,
    /// Ray actors on the cluster `ray.init` joined, placed by `placement_strategy`; each runs
    /// the env runner in its process and connects back to the learner. Started by the Python
    /// package (`impala_rs`), which owns the actors.
    Ray,
}

impl EnvRunnerBackend {
    /// The config spelling (`"threads"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EnvRunnerBackend::Threads => "threads",
            EnvRunnerBackend::Ray => "ray",
        }
    }
}

/// Which implementation of `env` to run (`env_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EnvBackend {
    /// A native env when `env` names one (`impala envs`), else Gymnasium in Python workers.
    #[default]
    Auto,
    /// Only native envs; any other id is an error.
    Native,
    /// Gymnasium's implementation in Python workers, even for ids that have a native twin.
    Gymnasium,
}

impl EnvBackend {
    /// The config spelling (`"auto"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EnvBackend::Auto => "auto",
            EnvBackend::Native => "native",
            EnvBackend::Gymnasium => "gymnasium",
        }
    }
}

/// How `evaluation_duration` is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DurationUnit {
    /// Whole episodes.
    #[default]
    Episodes,
    /// Env steps.
    Timesteps,
}

/// Every option of RLlib's `ImpalaConfig` (old API stack names, see `rllib/algorithms/impala/impala.py`) and the
/// general `AlgorithmConfig` options it relies on, with RLlib's defaults unless a field's doc says
/// otherwise. New API stack names (`num_env_runners`, `num_learners`, ...) are the field names
/// where RLlib renamed them; the old names are accepted as aliases in config files.
///
/// Fields RLlib spells with a leading underscore (`_separate_vf_optimizer`, `_lr_vf`,
/// `_fake_gpus`, `_env_runners_only`, `_skip_learners`) keep that spelling in files.
///
/// The `#[serde(alias)]` names are the ones listed in [`crate::ALIASES`] (a test checks both
/// agree); optional scalars also accept the string `"none"`, because TOML has no null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpalaConfig {
    // ---- environment() ----
    /// The Gymnasium id of the environment (RLlib's `env`).
    pub env: String,
    /// Keyword arguments for the environment's constructor (e.g. `max_episode_steps`).
    pub env_config: BTreeMap<String, serde_json::Value>,
    /// Clip rewards to `[-c, c]` (RLlib's `clip_rewards`: `None` = no clipping; Atari uses 1).
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub clip_rewards: Option<f64>,
    /// Clip continuous actions to the action space bounds before stepping the env (when
    /// `normalize_actions` is off, or the space has an infinite bound).
    pub clip_actions: bool,
    /// The policy acts in `[-1, 1]` for a bounded `Box` action space, mapped onto its bounds
    /// (and clipped to them) before stepping the env: RLlib's default.
    pub normalize_actions: bool,
    /// Normalise observations with a running mean/std filter (RLlib's `observation_filter=
    /// "MeanStdFilter"` when true). Unlike RLlib, each env keeps its own statistics: they are
    /// not yet synced across runners nor saved in checkpoints, so evaluating or resuming a
    /// checkpoint starts the filters afresh.
    pub normalize_observations: bool,
    /// Native or Gymnasium envs (impala-rs option; see [`EnvBackend`]).
    pub env_backend: EnvBackend,
    /// The Python interpreter of Gymnasium envs (impala-rs option); `None`: `$IMPALA_PYTHON`,
    /// else the project's `.venv/bin/python`, else `python3`.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub python_executable: Option<String>,

    // ---- training() ----
    /// Discount factor.
    pub gamma: f64,
    /// Learning rate (ignored when `lr_schedule` is set).
    pub lr: f64,
    /// Env steps per train batch (RLlib concatenates fragments until at least this many).
    pub train_batch_size: usize,
    /// The model.
    pub model: ModelConfig,
    /// Use V-trace targets (false = A3C-style loss with GAE(lambda=1) advantages).
    pub vtrace: bool,
    /// rho-bar: clip for importance weights in the value targets; `None` = no clipping.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub vtrace_clip_rho_threshold: Option<f64>,
    /// pg-rho-bar: clip for importance weights in the policy-gradient advantages; `None` = none.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub vtrace_clip_pg_rho_threshold: Option<f64>,
    /// Drop the last step of every fragment from the loss (RLlib's legacy behaviour, default
    /// `True` there). We bootstrap every row properly from `V(x_T)`, so the default is `false`.
    pub vtrace_drop_last_ts: bool,
    /// Slots per tower stack reserved for loading data in parallel (multi-GPU learner).
    pub num_multi_gpu_tower_stacks: usize,
    /// RLlib's deprecated name of `num_multi_gpu_tower_stacks`: validation copies it there with
    /// a deprecation warning, as RLlib's `validate_config` does.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub num_data_loader_buffers: Option<usize>,
    /// How many train batches are retained for `num_sgd_iter` passes.
    pub minibatch_buffer_size: usize,
    /// Passes over each train batch (new API stack name `num_epochs`).
    #[serde(alias = "num_epochs")]
    pub num_sgd_iter: usize,
    /// Replayed batches per new batch on average (`p:1`); 0 disables replay.
    pub replay_proportion: f64,
    /// Sample batches kept for replay.
    pub replay_buffer_num_slots: usize,
    /// Capacity of the learner's input queue (train batches).
    pub learner_queue_size: usize,
    /// Seconds the learner waits for a train batch before reporting a stall (not fatal).
    pub learner_queue_timeout: f64,
    /// Unconsumed sample batches allowed per env runner.
    #[serde(
        alias = "max_sample_requests_in_flight_per_worker",
        alias = "max_requests_in_flight_per_env_runner"
    )]
    pub max_requests_in_flight_per_sampler_worker: usize,
    /// Unconsumed batches allowed per aggregation worker.
    #[serde(alias = "max_requests_in_flight_per_aggregator_actor")]
    pub max_requests_in_flight_per_aggregator_worker: usize,
    /// Seconds the driver waits for ready samples per training step (0 = only what is ready).
    pub timeout_s_sampler_manager: f64,
    /// Seconds the driver waits for aggregation results per training step.
    pub timeout_s_aggregator_manager: f64,
    /// Training steps between weight broadcasts to env runners.
    pub broadcast_interval: usize,
    /// Extra threads that apply replay and build train batches off the driver thread.
    #[serde(alias = "num_aggregator_actors_per_learner")]
    pub num_aggregation_workers: usize,
    /// Clip the global norm of gradients to this; `None` = no clipping.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub grad_clip: Option<f64>,
    /// How `grad_clip` clips (RLlib's `grad_clip_by`): the global norm of each optimizer's
    /// gradients (`"global_norm"`), each parameter's norm (`"norm"`) or each element
    /// (`"value"`).
    pub grad_clip_by: GradClipBy,
    /// The optimizer.
    pub opt_type: OptType,
    /// Piecewise-linear learning-rate schedule `[[timestep, lr], ...]`.
    pub lr_schedule: Option<Schedule>,
    /// RMSProp decay of the squared-gradient average (torch's `alpha`; see [`OptType::Rmsprop`]).
    pub decay: f64,
    /// RMSProp momentum.
    pub momentum: f64,
    /// RMSProp epsilon.
    pub epsilon: f64,
    /// Weight of the value-function loss.
    pub vf_loss_coeff: f64,
    /// Weight of the entropy bonus.
    pub entropy_coeff: f64,
    /// Piecewise-linear entropy-coefficient schedule `[[timestep, coeff], ...]`.
    pub entropy_coeff_schedule: Option<Schedule>,
    /// Optimise the value function with its own Adam (`_lr_vf`).
    #[serde(rename = "_separate_vf_optimizer")]
    pub separate_vf_optimizer: bool,
    /// Learning rate of the separate value-function optimizer.
    #[serde(rename = "_lr_vf")]
    pub lr_vf: f64,
    /// How loss terms are reduced (impala-rs option; RLlib's old stack sums).
    pub loss_reduction: LossReduction,
    /// Train with the single-device `LearnerThread` instead of the multi-GPU learner thread
    /// (RLlib's `simple_optimizer`; RLlib's validation sets it to false for single-agent torch,
    /// so the multi-GPU thread is the normal path, and the tower-stack rules apply only there).
    pub simple_optimizer: bool,

    // ---- env_runners() ----
    /// Env runner threads (old name `num_workers`); 0 samples on the driver thread.
    #[serde(alias = "num_workers", alias = "num_rollout_workers")]
    pub num_env_runners: usize,
    /// Environments stepped together by each runner (old name `num_envs_per_worker`).
    #[serde(alias = "num_envs_per_worker")]
    pub num_envs_per_env_runner: usize,
    /// Steps per row of a sample batch.
    pub rollout_fragment_length: usize,
    /// Python envs hosted by one env worker process (impala-rs option); `None`: all envs of a
    /// runner in one worker (as RLlib steps sub-envs in the runner's process).
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub num_envs_per_env_worker: Option<usize>,
    /// Each Python env in its own worker process (RLlib's `remote_worker_envs`, which makes each
    /// sub-env a remote actor): `num_envs_per_env_worker = 1`.
    pub remote_worker_envs: bool,
    /// Seconds an env worker may take to start, reset or step before it is killed and its
    /// runner fails (RLlib's `sample_timeout_s`).
    pub sample_timeout_s: f64,
    /// LZ4-compress uint8 observations in fragments sent by remote env runners (RLlib's
    /// `compress_observations`); only with `impala train --listen`.
    pub compress_observations: bool,
    /// With `impala train --listen`: seconds the driver waits for its `num_env_runners`
    /// remote env runners to connect before it fails (none came) or trains with those it has.
    pub env_runner_connect_timeout_s: f64,
    /// Recreate env runners that failed (old name `recreate_failed_workers`).
    #[serde(alias = "recreate_failed_workers")]
    pub restart_failed_env_runners: bool,
    /// Recreate only the Python env that raised, ending its episode, instead of failing the
    /// whole runner (RLlib's `restart_failed_sub_environments`).
    pub restart_failed_sub_environments: bool,
    /// How many runner restarts are allowed before training fails.
    #[serde(alias = "max_num_worker_restarts")]
    pub max_num_env_runner_restarts: usize,
    /// Seconds stopping waits for the env runners to end, all together (impala-rs's own): a
    /// runner stuck in a hung env step is not awaited for its `sample_timeout_s`.
    pub shutdown_grace_s: f64,
    /// Threads in this process, or Ray actors (impala-rs option; see [`EnvRunnerBackend`]).
    pub env_runner_backend: EnvRunnerBackend,
    /// Ray env runner actors connect back to the driver over TLS, with a certificate made for
    /// the run (impala-rs option; `env_runner_backend = "ray"` only: `impala env-runner`
    /// processes take theirs as `--tls-ca`, the driver as `--tls-cert`/`--tls-key`).
    pub env_runner_tls: bool,
    /// CPUs reserved per env runner in the resource request.
    #[serde(alias = "num_cpus_per_worker")]
    pub num_cpus_per_env_runner: f64,
    /// GPUs reserved per env runner in the resource request.
    #[serde(alias = "num_gpus_per_worker")]
    pub num_gpus_per_env_runner: f64,
    /// Custom Ray resources reserved per env runner in the resource request (old name
    /// `custom_resources_per_worker`).
    #[serde(alias = "custom_resources_per_worker")]
    pub custom_resources_per_env_runner: BTreeMap<String, f64>,

    // ---- learners() ----
    /// Learner workers (new API stack); 0 means the learner runs in the main process.
    #[serde(alias = "num_learner_workers")]
    pub num_learners: usize,
    /// Train batch size per learner (new API stack); overrides `train_batch_size` when set.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub train_batch_size_per_learner: Option<usize>,
    /// GPUs per learner worker (new API stack).
    #[serde(alias = "num_gpus_per_learner_worker")]
    pub num_gpus_per_learner: f64,
    /// Threads that copy train batches to the GPU (new API stack).
    pub num_gpu_loader_threads: usize,
    /// libtorch intra-op threads of the learner (impala-rs option; runners always use 1).
    pub num_learner_threads: usize,

    // ---- framework() ----
    /// Precision of the learner's forward passes (impala-rs option, Lightning's spelling; env
    /// runners infer in float32, which is faster for their small batches): `bf16-mixed` needs a
    /// learner on a CPU with AVX512-BF16 or AMX, or a GPU with bfloat16 convolutions, and is
    /// refused at start-up elsewhere.
    pub precision: Precision,

    // ---- multi_agent() ----
    /// The policy ids of a multi-agent env (RLlib's `policies`); empty: one `default_policy`
    /// for every agent. Each policy has the env's spaces of the agents that map to it.
    pub policies: Vec<String>,
    /// Agent id, or a pattern with `*` wildcards, to policy id: the file form of RLlib's
    /// `policy_mapping_fn`. An agent's own id wins over patterns, and at most one pattern may
    /// match it. Empty: every agent to the only policy, or to the policy named as the agent.
    pub policy_mapping: BTreeMap<String, String>,
    /// The policies that learn (RLlib's `policies_to_train`); `None`: all of them. The others
    /// act with the weights they start with (or restore), unchanged.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub policies_to_train: Option<Vec<String>>,
    /// What `train_batch_size` and `min_sample_timesteps_per_iteration` count in a
    /// multi-agent run (RLlib's `count_steps_by`).
    pub count_steps_by: CountStepsBy,
    /// Per policy id, the `training()` options and `model` options it learns with instead of
    /// the run's (RLlib's `PolicySpec(config=...)`), e.g. `{ lr = 0.001, model = {
    /// fcnet_hiddens = [32] } }`.
    pub policy_config: BTreeMap<String, BTreeMap<String, serde_json::Value>>,

    // ---- resources() ----
    /// GPUs for the learner (RLlib's default is 1; impala-rs defaults to 0 so the default
    /// config runs on any machine).
    pub num_gpus: f64,
    /// CPUs for the driver process (old name `num_cpus_for_driver`).
    #[serde(alias = "num_cpus_for_driver")]
    pub num_cpus_for_main_process: f64,
    /// Pretend GPUs exist by placing towers on the CPU (for testing multi-GPU code).
    #[serde(rename = "_fake_gpus")]
    pub fake_gpus: bool,
    /// How the bundles of the resource request are placed.
    pub placement_strategy: PlacementStrategy,

    // ---- reporting() ----
    /// Minimum seconds per `train()` call.
    #[serde(alias = "min_iter_time_s")]
    pub min_time_s_per_iteration: f64,
    /// Minimum env steps sampled per `train()` call.
    #[serde(alias = "timesteps_per_iteration")]
    pub min_sample_timesteps_per_iteration: usize,
    /// Minimum env steps trained per `train()` call.
    pub min_train_timesteps_per_iteration: usize,
    /// Episodes averaged for `episode_return_mean`.
    #[serde(alias = "metrics_smoothing_episodes")]
    pub metrics_num_episodes_for_smoothing: usize,

    // ---- evaluation() ----
    /// Evaluate every this many iterations; `None` (or 0, as in RLlib) = never.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub evaluation_interval: Option<usize>,
    /// How much to evaluate each time.
    pub evaluation_duration: usize,
    /// Unit of `evaluation_duration`.
    pub evaluation_duration_unit: DurationUnit,
    /// Env runners dedicated to evaluation (0 = evaluate on the driver thread).
    #[serde(alias = "evaluation_num_workers")]
    pub evaluation_num_env_runners: usize,
    /// Run each evaluation on the evaluation env runners while training goes on, reporting it
    /// with the iteration that started it (RLlib's `evaluation_parallel_to_training`); needs
    /// `evaluation_num_env_runners > 0`.
    pub evaluation_parallel_to_training: bool,
    /// Sample actions during evaluation (false = greedy).
    pub evaluation_explore: bool,

    // ---- debugging() ----
    /// Seed for every RNG (envs, policies, replay); `None` = random.
    #[serde(deserialize_with = "crate::serde_util::none_or")]
    pub seed: Option<u64>,
    /// Log level of the `impala` command.
    pub log_level: String,
    /// Only run the env runners: discard their samples but report their metrics (RLlib's
    /// `_env_runners_only`, for measuring sampling throughput).
    #[serde(rename = "_env_runners_only")]
    pub env_runners_only: bool,
    /// Never send train batches to the learner (RLlib's `_skip_learners`).
    #[serde(rename = "_skip_learners")]
    pub skip_learners: bool,

    // ---- api_stack() ----
    /// RLlib's `api_stack(enable_rl_module_and_learner=...)`: the API stack the config is
    /// written for. Both of RLlib's stacks drive the one engine here (the options and models of
    /// either stack mean the same), so it changes nothing but is kept, as written.
    pub enable_rl_module_and_learner: bool,
    /// RLlib's `api_stack(enable_env_runner_and_connector_v2=...)`: as
    /// `enable_rl_module_and_learner`, for the env runners; the one engine either way.
    pub enable_env_runner_and_connector_v2: bool,
}

impl Default for ImpalaConfig {
    fn default() -> Self {
        ImpalaConfig {
            env: "CartPole-v1".into(),
            env_config: BTreeMap::new(),
            clip_rewards: None,
            clip_actions: false,
            normalize_actions: true,
            normalize_observations: false,
            env_backend: EnvBackend::Auto,
            python_executable: None,

            gamma: 0.99,
            lr: 0.0005,
            train_batch_size: 500,
            model: ModelConfig::default(),
            vtrace: true,
            vtrace_clip_rho_threshold: Some(1.0),
            vtrace_clip_pg_rho_threshold: Some(1.0),
            vtrace_drop_last_ts: false,
            num_multi_gpu_tower_stacks: 1,
            num_data_loader_buffers: None,
            minibatch_buffer_size: 1,
            num_sgd_iter: 1,
            replay_proportion: 0.0,
            replay_buffer_num_slots: 0,
            learner_queue_size: 16,
            learner_queue_timeout: 300.0,
            max_requests_in_flight_per_sampler_worker: 2,
            max_requests_in_flight_per_aggregator_worker: 2,
            timeout_s_sampler_manager: 0.0,
            timeout_s_aggregator_manager: 0.0,
            broadcast_interval: 1,
            num_aggregation_workers: 0,
            grad_clip: Some(40.0),
            grad_clip_by: GradClipBy::GlobalNorm,
            opt_type: OptType::Adam,
            lr_schedule: None,
            decay: 0.99,
            momentum: 0.0,
            epsilon: 0.1,
            vf_loss_coeff: 0.5,
            entropy_coeff: 0.01,
            entropy_coeff_schedule: None,
            separate_vf_optimizer: false,
            lr_vf: 0.0005,
            loss_reduction: LossReduction::Sum,
            simple_optimizer: false,

            num_env_runners: 2,
            num_envs_per_env_runner: 1,
            rollout_fragment_length: 50,
            num_envs_per_env_worker: None,
            remote_worker_envs: false,
            sample_timeout_s: 60.0,
            compress_observations: false,
            env_runner_connect_timeout_s: 120.0,
            restart_failed_env_runners: true,
            restart_failed_sub_environments: false,
            max_num_env_runner_restarts: 1000,
            shutdown_grace_s: 5.0,
            env_runner_backend: EnvRunnerBackend::Threads,
            env_runner_tls: false,
            num_cpus_per_env_runner: 1.0,
            num_gpus_per_env_runner: 0.0,
            custom_resources_per_env_runner: BTreeMap::new(),

            num_learners: 0,
            train_batch_size_per_learner: None,
            num_gpus_per_learner: 0.0,
            num_gpu_loader_threads: 8,
            num_learner_threads: 1,
            precision: Precision::Fp32,

            policies: Vec::new(),
            policy_mapping: BTreeMap::new(),
            policies_to_train: None,
            count_steps_by: CountStepsBy::EnvSteps,
            policy_config: BTreeMap::new(),

            num_gpus: 0.0,
            num_cpus_for_main_process: 1.0,
            fake_gpus: false,
            placement_strategy: PlacementStrategy::Pack,

            min_time_s_per_iteration: 10.0,
            min_sample_timesteps_per_iteration: 0,
            min_train_timesteps_per_iteration: 0,
            metrics_num_episodes_for_smoothing: 100,

            evaluation_interval: None,
            evaluation_duration: 10,
            evaluation_duration_unit: DurationUnit::Episodes,
            evaluation_num_env_runners: 0,
            evaluation_parallel_to_training: false,
            evaluation_explore: false,

            seed: None,
            log_level: "WARN".into(),
            env_runners_only: false,
            skip_learners: false,
            enable_rl_module_and_learner: true,
            enable_env_runner_and_connector_v2: true,
        }
    }
}
