//! The key registry and the builder groups, generated from one table per group so that keys,
//! their groups, their types and their setters cannot drift apart.

use std::collections::BTreeMap;

use impala_core::{ConvFilter, GradClipBy, LossReduction, OptType, Precision, Schedule};

use crate::config::{DurationUnit, EnvBackend, EnvRunnerBackend, ImpalaConfig, PlacementStrategy};
use crate::model::ModelConfig;
use crate::multi_agent::CountStepsBy;

/// RLlib's config groups (`AlgorithmConfig.training()`, `.env_runners()`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// `environment()`.
    Environment,
    /// `training()` (including the `model` options).
    Training,
    /// `env_runners()` (RLlib's old name: `rollouts()`).
    EnvRunners,
    /// `fault_tolerance()`.
    FaultTolerance,
    /// `learners()`.
    Learners,
    /// `framework()`.
    Framework,
    /// `resources()`.
    Resources,
    /// `multi_agent()`.
    MultiAgent,
    /// `reporting()`.
    Reporting,
    /// `evaluation()`.
    Evaluation,
    /// `debugging()`.
    Debugging,
    /// `api_stack()`.
    ApiStack,
}

impl Group {
    /// Every group, in RLlib's order.
    pub const ALL: [Group; 12] = [
        Group::Environment,
        Group::Training,
        Group::EnvRunners,
        Group::FaultTolerance,
        Group::Learners,
        Group::Framework,
        Group::Resources,
        Group::MultiAgent,
        Group::Reporting,
        Group::Evaluation,
        Group::Debugging,
        Group::ApiStack,
    ];

    /// The group's method name (`"env_runners"`).
    pub fn name(self) -> &'static str {
        match self {
            Group::Environment => "environment",
            Group::Training => "training",
            Group::EnvRunners => "env_runners",
            Group::FaultTolerance => "fault_tolerance",
            Group::Learners => "learners",
            Group::Framework => "framework",
            Group::Resources => "resources",
            Group::MultiAgent => "multi_agent",
            Group::Reporting => "reporting",
            Group::Evaluation => "evaluation",
            Group::Debugging => "debugging",
            Group::ApiStack => "api_stack",
        }
    }

    /// The group called `name`, accepting RLlib's old `rollouts` for `env_runners`.
    pub fn from_name(name: &str) -> Option<Group> {
        if name == "rollouts" {
            return Some(Group::EnvRunners);
        }
        Group::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// One config key: its name in files, its group and its Rust type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// The name in files and overrides (`lr`, `_fake_gpus`); model keys without `model.`.
    pub name: &'static str,
    /// The builder group that sets it.
    pub group: Group,
    /// The Rust type, e.g. `Option<f64>` (see [`KeyInfo::expected`] for words).
    pub type_name: &'static str,
}

impl KeyInfo {
    /// What the key accepts, in words, for error messages.
    ///
    /// ```
    /// let grad_clip = impala_config::key_info("grad_clip").ok_or("no such key")?;
    /// assert_eq!(grad_clip.expected(), "a number, or none");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn expected(&self) -> String {
        describe_type(self.type_name)
    }
}

/// A Rust type name in words.
fn describe_type(ty: &str) -> String {
    let ty = ty.replace(' ', "");
    if let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        return format!("{}, or none", describe_type(inner));
    }
    if let Some(inner) = ty.strip_prefix("Vec<").and_then(|t| t.strip_suffix('>')) {
        return format!("a list of {}", plural(&describe_type(inner)));
    }
    match ty.as_str() {
        "f64" => "a number".into(),
        "usize" | "u64" => "a non-negative integer".into(),
        "bool" => "true or false".into(),
        "String" => "a string".into(),
        "ConvFilter" => "[out_channels, kernel, stride] (kernel, stride: an int or [h, w])".into(),
        "Schedule" => "a list of [timestep, value] pairs".into(),
        "OptType" => "\"adam\" or \"rmsprop\"".into(),
        "GradClipBy" => "\"global_norm\", \"norm\" or \"value\"".into(),
        "LossReduction" => "\"sum\" or \"mean\"".into(),
        "Precision" => "\"fp32\" or \"bf16-mixed\"".into(),
        "DurationUnit" => "\"episodes\" or \"timesteps\"".into(),
        "EnvBackend" => "\"auto\", \"native\" or \"gymnasium\"".into(),
        "EnvRunnerBackend" => "\"threads\" or \"ray\"".into(),
        "CountStepsBy" => "\"env_steps\" or \"agent_steps\"".into(),
        "PlacementStrategy" => "\"PACK\", \"SPREAD\", \"STRICT_PACK\" or \"STRICT_SPREAD\"".into(),
        "ModelConfig" => "a table of model options".into(),
        "BTreeMap<String,f64>" => "a table of numbers".into(),
        "BTreeMap<String,String>" => "a table of strings".into(),
        "BTreeMap<String,BTreeMap<String,serde_json::Value>>" => "a table of tables".into(),
        "BTreeMap<String,serde_json::Value>" => "a table".into(),
        other => other.into(),
    }
}

fn plural(words: &str) -> String {
    let words = words.strip_prefix("a ").unwrap_or(words);
    match words {
        "number" => "numbers".into(),
        "non-negative integer" => "non-negative integers".into(),
        other => other.into(),
    }
}

/// An old or new RLlib spelling of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The spelling accepted in files and overrides.
    pub name: &'static str,
    /// The key it sets.
    pub canonical: &'static str,
    /// RLlib deprecated this spelling (using it returns a warning); `false` for new API stack
    /// names, accepted silently.
    pub deprecated: bool,
}

const fn old(name: &'static str, canonical: &'static str) -> Alias {
    Alias { name, canonical, deprecated: true }
}

const fn new_api(name: &'static str, canonical: &'static str) -> Alias {
    Alias { name, canonical, deprecated: false }
}

/// Every alias (the `#[serde(alias)]` attributes of [`ImpalaConfig`] list the same names).
pub const ALIASES: &[Alias] = &[
    old("num_workers", "num_env_runners"),
    old("num_rollout_workers", "num_env_runners"),
    old("num_envs_per_worker", "num_envs_per_env_runner"),
    old("recreate_failed_workers", "restart_failed_env_runners"),
    old("max_num_worker_restarts", "max_num_env_runner_restarts"),
    old("num_cpus_per_worker", "num_cpus_per_env_runner"),
    old("num_gpus_per_worker", "num_gpus_per_env_runner"),
    old("custom_resources_per_worker", "custom_resources_per_env_runner"),
    old("num_cpus_for_driver", "num_cpus_for_main_process"),
    old("max_sample_requests_in_flight_per_worker", "max_requests_in_flight_per_sampler_worker"),
    old("evaluation_num_workers", "evaluation_num_env_runners"),
    old("num_learner_workers", "num_learners"),
    old("num_gpus_per_learner_worker", "num_gpus_per_learner"),
    old("min_iter_time_s", "min_time_s_per_iteration"),
    old("timesteps_per_iteration", "min_sample_timesteps_per_iteration"),
    old("metrics_smoothing_episodes", "metrics_num_episodes_for_smoothing"),
    new_api("num_epochs", "num_sgd_iter"),
    new_api("num_aggregator_actors_per_learner", "num_aggregation_workers"),
    new_api(
        "max_requests_in_flight_per_aggregator_actor",
        "max_requests_in_flight_per_aggregator_worker",
    ),
    new_api("max_requests_in_flight_per_env_runner", "max_requests_in_flight_per_sampler_worker"),
];

/// The alias spelled `name`, if any.
pub fn alias(name: &str) -> Option<&'static Alias> {
    ALIASES.iter().find(|a| a.name == name)
}

/// The top-level key named `name` (aliases are not resolved; see [`alias`]).
pub fn key_info(name: &str) -> Option<&'static KeyInfo> {
    KEYS.iter().find(|k| k.name == name)
}

/// The model key named `name` (without `model.`).
pub fn model_key_info(name: &str) -> Option<&'static KeyInfo> {
    MODEL_KEYS.iter().find(|k| k.name == name)
}

macro_rules! key_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident, $serde:literal) => {
        $serde
    };
}

macro_rules! setter {
    ([into] $target:ident $field:ident : $ty:ty) => {
        #[doc = concat!("Sets [`", stringify!($target), "::", stringify!($field), "`].")]
        #[must_use]
        pub fn $field(self, value: impl Into<$ty>) -> Self {
            self.config.$field = value.into();
            self
        }
    };
    ([] $target:ident $field:ident : $ty:ty) => {
        #[doc = concat!("Sets [`", stringify!($target), "::", stringify!($field), "`].")]
        #[must_use]
        pub fn $field(self, value: $ty) -> Self {
            self.config.$field = value;
            self
        }
    };
}

/// Generates, from one table of `(field, file name, type)` per group: a builder struct per
/// group with one setter per field, the key registry `$keys`, and `$set`, which deserializes a
/// JSON value into the field named by a key.
macro_rules! groups {
    (
        target = $target:ident; keys = $keys:ident; set = $set:ident;
        $(
            $(#[$bdoc:meta])*
            $group:ident => $builder:ident {
                $( $([$into:ident])? $field:ident $(as $serde:literal)? : $ty:ty ),* $(,)?
            }
        )*
    ) => {
        $(
            $(#[$bdoc])*
            #[derive(Debug)]
            pub struct $builder<'a> {
                config: &'a mut $target,
            }

            impl<'a> $builder<'a> {
                pub(crate) fn new(config: &'a mut $target) -> Self {
                    $builder { config }
                }

                $( setter! { [$($into)?] $target $field : $ty } )*
            }
        )*

        /// Every key of this table, in declaration order.
        pub(crate) const $keys: &[KeyInfo] = &[
            $( $( KeyInfo {
                name: key_name!($field $(, $serde)?),
                group: Group::$group,
                type_name: stringify!($ty),
            }, )* )*
        ];

        /// Sets the field named `key` from `value`; `None` when no field has that name.
        pub(crate) fn $set(
            config: &mut $target,
            key: &str,
            value: serde_json::Value,
        ) -> Option<Result<(), serde_json::Error>> {
            $( $(
                if key == key_name!($field $(, $serde)?) {
                    return Some(<$ty as serde::Deserialize>::deserialize(value).map(|v| config.$field = v));
                }
            )* )*
            None
        }
    };
}

groups! {
    target = ImpalaConfig; keys = FIELD_KEYS; set = set_config_field;

    /// RLlib's `environment()`: which environment and how its outputs are treated.
    Environment => Environment {
        [into] env: String,
        env_config: BTreeMap<String, serde_json::Value>,
        [into] clip_rewards: Option<f64>,
        clip_actions: bool,
        normalize_actions: bool,
        normalize_observations: bool,
        env_backend: EnvBackend,
        [into] python_executable: Option<String>,
    }

    /// RLlib's `training()`: the loss, optimizer, learner queue and replay options (the model
    /// is set with [`Training::model`]).
    Training => Training {
        gamma: f64,
        lr: f64,
        train_batch_size: usize,
        train_batch_size_per_learner: Option<usize>,
        vtrace: bool,
        [into] vtrace_clip_rho_threshold: Option<f64>,
        [into] vtrace_clip_pg_rho_threshold: Option<f64>,
        vtrace_drop_last_ts: bool,
        num_multi_gpu_tower_stacks: usize,
        num_data_loader_buffers: Option<usize>,
        minibatch_buffer_size: usize,
        num_sgd_iter: usize,
        replay_proportion: f64,
        replay_buffer_num_slots: usize,
        learner_queue_size: usize,
        learner_queue_timeout: f64,
        max_requests_in_flight_per_sampler_worker: usize,
        max_requests_in_flight_per_aggregator_worker: usize,
        timeout_s_sampler_manager: f64,
        timeout_s_aggregator_manager: f64,
        broadcast_interval: usize,
        num_aggregation_workers: usize,
        num_gpu_loader_threads: usize,
        [into] grad_clip: Option<f64>,
        grad_clip_by: GradClipBy,
        opt_type: OptType,
        lr_schedule: Option<Schedule>,
        decay: f64,
        momentum: f64,
        epsilon: f64,
        vf_loss_coeff: f64,
        entropy_coeff: f64,
        entropy_coeff_schedule: Option<Schedule>,
        separate_vf_optimizer as "_separate_vf_optimizer": bool,
        lr_vf as "_lr_vf": f64,
        loss_reduction: LossReduction,
        simple_optimizer: bool,
    }

    /// RLlib's `env_runners()` (old name `rollouts()`): how samples are collected.
    EnvRunners => EnvRunners {
        num_env_runners: usize,
        num_envs_per_env_runner: usize,
        rollout_fragment_length: usize,
        num_envs_per_env_worker: Option<usize>,
        remote_worker_envs: bool,
        sample_timeout_s: f64,
        compress_observations: bool,
        env_runner_connect_timeout_s: f64,
        env_runner_backend: EnvRunnerBackend,
        env_runner_tls: bool,
        num_cpus_per_env_runner: f64,
        num_gpus_per_env_runner: f64,
        custom_resources_per_env_runner: BTreeMap<String, f64>,
    }

    /// RLlib's `fault_tolerance()`: what happens when an env runner fails.
    FaultTolerance => FaultTolerance {
        restart_failed_env_runners: bool,
        restart_failed_sub_environments: bool,
        max_num_env_runner_restarts: usize,
        shutdown_grace_s: f64,
    }

    /// RLlib's `learners()`: learner workers and their devices.
    Learners => Learners {
        num_learners: usize,
        num_gpus_per_learner: f64,
        num_learner_threads: usize,
    }

    /// RLlib's `framework()`: impala-rs runs on libtorch; this sets its numeric precision.
    Framework => Framework {
        precision: Precision,
    }

    /// RLlib's `resources()`: driver CPUs and learner GPUs.
    Resources => Resources {
        num_gpus: f64,
        num_cpus_for_main_process: f64,
        fake_gpus as "_fake_gpus": bool,
        placement_strategy: PlacementStrategy,
    }

    /// RLlib's `multi_agent()`: the policies of a multi-agent env, which agents each acts
    /// for, which learn, and what the step counts count.
    MultiAgent => MultiAgent {
        policies: Vec<String>,
        policy_mapping: BTreeMap<String, String>,
        policies_to_train: Option<Vec<String>>,
        count_steps_by: CountStepsBy,
        policy_config: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    }

    /// RLlib's `reporting()`: how long an iteration lasts and how metrics are smoothed.
    Reporting => Reporting {
        min_time_s_per_iteration: f64,
        min_sample_timesteps_per_iteration: usize,
        min_train_timesteps_per_iteration: usize,
        metrics_num_episodes_for_smoothing: usize,
    }

    /// RLlib's `evaluation()`: periodic evaluation runs.
    Evaluation => Evaluation {
        evaluation_interval: Option<usize>,
        evaluation_duration: usize,
        evaluation_duration_unit: DurationUnit,
        evaluation_num_env_runners: usize,
        evaluation_parallel_to_training: bool,
        evaluation_explore: bool,
    }

    /// RLlib's `debugging()`: seeds, logging and RLlib's debug switches.
    Debugging => Debugging {
        seed: Option<u64>,
        [into] log_level: String,
        env_runners_only as "_env_runners_only": bool,
        skip_learners as "_skip_learners": bool,
    }

    /// RLlib's `api_stack()`: which of RLlib's API stacks the config is written for; both drive
    /// the same engine here.
    ApiStack => ApiStack {
        enable_rl_module_and_learner: bool,
        enable_env_runner_and_connector_v2: bool,
    }
}

groups! {
    target = ModelConfig; keys = MODEL_KEYS; set = set_model_field;

    /// RLlib's `model` dict, set inside [`Training::model`].
    Training => Model {
        fcnet_hiddens: Vec<usize>,
        [into] fcnet_activation: String,
        conv_filters: Option<Vec<ConvFilter>>,
        [into] conv_activation: String,
        post_fcnet_hiddens: Vec<usize>,
        [into] post_fcnet_activation: String,
        vf_share_layers: bool,
        use_lstm: bool,
        lstm_cell_size: usize,
        max_seq_len: usize,
        framestack: usize,
        free_log_std: bool,
        [into] custom_model: Option<String>,
        custom_model_config: BTreeMap<String, serde_json::Value>,
    }
}

/// The `model` key, which [`Training::model`] sets.
const MODEL_KEY: KeyInfo =
    KeyInfo { name: "model", group: Group::Training, type_name: "ModelConfig" };

/// Every top-level key: the fields of the tables above plus `model`.
pub(crate) static KEYS: std::sync::LazyLock<Vec<KeyInfo>> = std::sync::LazyLock::new(|| {
    let mut keys = FIELD_KEYS.to_vec();
    keys.push(MODEL_KEY);
    keys
});

/// Every top-level key of [`ImpalaConfig`] (its model keys are in [`model_keys`]).
pub fn keys() -> &'static [KeyInfo] {
    &KEYS
}

/// Every key of [`ModelConfig`].
pub fn model_keys() -> &'static [KeyInfo] {
    MODEL_KEYS
}

impl Training<'_> {
    /// Sets the model options, RLlib's `training(model={...})`.
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let config = ImpalaConfig::default()
    ///     .training(|t| t.model(|m| m.fcnet_hiddens(vec![64, 64]).fcnet_activation("relu")));
    /// assert_eq!(config.model.fcnet_hiddens, vec![64, 64]);
    /// ```
    #[must_use]
    pub fn model(self, f: impl FnOnce(Model<'_>) -> Model<'_>) -> Self {
        let _ = f(Model::new(&mut self.config.model));
        self
    }
}

macro_rules! entry_points {
    ($( $method:ident => $builder:ident ),* $(,)?) => {
        impl ImpalaConfig {
            $(
                #[doc = concat!("RLlib's `", stringify!($method), "()`: sets the options of [`", stringify!($builder), "`] (see the crate docs for an example).")]
                #[must_use]
                pub fn $method(mut self, f: impl FnOnce($builder<'_>) -> $builder<'_>) -> Self {
                    let _ = f($builder::new(&mut self));
                    self
                }
            )*
        }
    };
}

entry_points! {
    environment => Environment,
    training => Training,
    env_runners => EnvRunners,
    fault_tolerance => FaultTolerance,
    learners => Learners,
    framework => Framework,
    resources => Resources,
    multi_agent => MultiAgent,
    reporting => Reporting,
    evaluation => Evaluation,
    debugging => Debugging,
    api_stack => ApiStack,
}
