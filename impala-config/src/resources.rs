//! RLlib's `Impala.default_resource_request`: what a run asks for, printable, and checked
//! against the machine.

use std::collections::BTreeMap;
use std::fmt;

use crate::config::{ImpalaConfig, PlacementStrategy};
use crate::diagnostics::{Warning, WarningKind};
use crate::error::{ConfigError, Result};

/// Who a [`Bundle`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleRole {
    /// The driver with the learner, plus the aggregation workers (1 CPU each), kept together
    /// for bandwidth, as RLlib does.
    Driver {
        /// How many aggregation workers share the bundle.
        num_aggregation_workers: usize,
    },
    /// One env runner.
    EnvRunner,
    /// One evaluation env runner (only while evaluation is on).
    EvaluationEnvRunner,
}

impl fmt::Display for BundleRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleRole::Driver { num_aggregation_workers } => {
                write!(f, "driver + {num_aggregation_workers} aggregation worker(s)")
            }
            BundleRole::EnvRunner => f.write_str("env runner"),
            BundleRole::EvaluationEnvRunner => f.write_str("evaluation env runner"),
        }
    }
}

/// One resource bundle (Ray's placement-group bundle).
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// Who it is for.
    pub role: BundleRole,
    /// CPUs.
    pub cpus: f64,
    /// GPUs.
    pub gpus: f64,
    /// Custom resources (`custom_resources_per_env_runner`).
    pub custom: BTreeMap<String, f64>,
}

/// The resources a run asks for, bundle by bundle (RLlib's `PlacementGroupFactory`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceRequest {
    /// The driver bundle first, then one per env runner, then one per evaluation env runner.
    pub bundles: Vec<Bundle>,
    /// How the bundles are placed.
    pub strategy: PlacementStrategy,
}

impl ImpalaConfig {
    /// RLlib's `Impala.default_resource_request` (its old API stack): a driver bundle
    /// of `num_cpus_for_main_process + num_aggregation_workers` CPUs and `num_gpus` GPUs (0 with
    /// `_fake_gpus`), one bundle per env runner with `num_cpus_per_env_runner`,
    /// `num_gpus_per_env_runner` and the custom resources, and, when evaluation is on, one such
    /// bundle per evaluation env runner (RLlib's `evaluation_config` overrides are not
    /// supported, so they use the env runner numbers). `num_learners` / `num_gpus_per_learner`
    /// (new API stack) are not part of it, as in RLlib's.
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let config = ImpalaConfig::default()
    ///     .training(|t| t.num_aggregation_workers(1))
    ///     .resources(|r| r.num_gpus(1.0));
    /// let request = config.default_resource_request();
    /// assert_eq!(request.bundles.len(), 3); // driver + 2 env runners
    /// assert_eq!((request.total_cpus(), request.total_gpus()), (4.0, 1.0));
    /// println!("{request}");
    /// ```
    pub fn default_resource_request(&self) -> ResourceRequest {
        let driver = Bundle {
            role: BundleRole::Driver { num_aggregation_workers: self.num_aggregation_workers },
            cpus: self.num_cpus_for_main_process + self.num_aggregation_workers as f64,
            gpus: if self.fake_gpus { 0.0 } else { self.num_gpus },
            custom: BTreeMap::new(),
        };
        let runner = |role| Bundle {
            role,
            cpus: self.num_cpus_per_env_runner,
            gpus: self.num_gpus_per_env_runner,
            custom: self.custom_resources_per_env_runner.clone(),
        };
        let num_eval = if self.evaluation_enabled() { self.evaluation_num_env_runners } else { 0 };
        let bundles = std::iter::once(driver)
            .chain((0..self.num_env_runners).map(|_| runner(BundleRole::EnvRunner)))
            .chain((0..num_eval).map(|_| runner(BundleRole::EvaluationEnvRunner)))
            .collect();
        ResourceRequest { bundles, strategy: self.placement_strategy }
    }
}

impl ResourceRequest {
    /// CPUs over all bundles.
    pub fn total_cpus(&self) -> f64 {
        self.bundles.iter().map(|b| b.cpus).sum()
    }

    /// GPUs over all bundles.
    pub fn total_gpus(&self) -> f64 {
        self.bundles.iter().map(|b| b.gpus).sum()
    }

    /// Checks the request against a machine with `available_cpus` and `available_gpus`.
    /// Too few GPUs is an error ([`ConfigError::InsufficientResources`], with the fix); too
    /// few CPUs is a warning, because impala-rs runs env runners as threads that time-share
    /// the cores (where Ray would wait forever for the placement group).
    ///
    /// ```
    /// use impala_config::{ConfigError, ImpalaConfig};
    /// let request = ImpalaConfig::default().resources(|r| r.num_gpus(2.0)).default_resource_request();
    /// assert!(matches!(request.check(16.0, 1.0), Err(ConfigError::InsufficientResources { .. })));
    /// let warnings = ImpalaConfig::default().default_resource_request().check(2.0, 0.0)?;
    /// assert_eq!(warnings.len(), 1); // 3 CPUs asked, 2 available
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, available_cpus: f64, available_gpus: f64) -> Result<Vec<Warning>> {
        let gpus = self.total_gpus();
        if gpus > available_gpus {
            let fix = if available_gpus > 0.0 {
                format!("set `num_gpus` (plus `num_gpus_per_env_runner` * env runners) to at most {available_gpus}, or `_fake_gpus = true` to run the GPU towers on the CPU")
            } else {
                "set `num_gpus = 0` and `num_gpus_per_env_runner = 0` to train on the CPU, or `_fake_gpus = true` to run the GPU towers on the CPU".into()
            };
            return Err(ConfigError::InsufficientResources {
                resource: "GPU",
                requested: gpus,
                available: available_gpus,
                fix,
            });
        }
        let cpus = self.total_cpus();
        let mut warnings = Vec::new();
        if cpus > available_cpus {
            warnings.push(Warning {
                key: "num_env_runners".into(),
                kind: WarningKind::CpusOversubscribed,
                message: format!(
                    "the config asks for {cpus} CPUs but this machine has {available_cpus}; the threads will share the cores (lower `num_env_runners` or `num_cpus_per_env_runner` to match)"
                ),
            });
        }
        Ok(warnings)
    }
}

impl fmt::Display for ResourceRequest {
    /// One line per run of equal bundles, e.g. `2 x env runner: 1 CPU, 0 GPU each`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "resource request ({}): {} CPU, {} GPU in {} bundle(s)",
            self.strategy.as_str(),
            self.total_cpus(),
            self.total_gpus(),
            self.bundles.len()
        )?;
        let mut i = 0;
        while let Some(first) = self.bundles.get(i) {
            let run = self.bundles[i..].iter().take_while(|b| *b == first).count();
            let custom: String = first.custom.iter().map(|(k, v)| format!(", {v} {k}")).collect();
            let (count, each) =
                if run > 1 { (format!("{run} x "), " each") } else { (String::new(), "") };
            writeln!(
                f,
                "  {count}{}: {} CPU, {} GPU{custom}{each}",
                first.role, first.cpus, first.gpus
            )?;
            i += run;
        }
        Ok(())
    }
}
