//! Where a run's config comes from: a config file, or the tuned example of the env when there is
//! none, then another env, a seed and `key=value` overrides (the `impala` command's `--env`,
//! `--seed` and `--set`, and every trial of a search), applied in that order and validated once.

use std::path::PathBuf;

use impala_config::{ConfigError, ConfigFormat, ImpalaConfig, ValidatedConfig};

/// The tuned example configs (`examples/*-impala*.toml`), embedded: a source without a file
/// starts from its env's example (`impala train --env LunarLander-v3` trains with
/// LunarLander's tuned settings, not CartPole's), and any other env from the first,
/// CartPole-v1's. The Atari games get their fast configs (42x42 frames), which learn on a
/// small CPU machine.
pub const EXAMPLE_CONFIGS: [(&str, &str); 6] = [
    ("CartPole-v1", include_str!("../../examples/cartpole-impala.toml")),
    ("Acrobot-v1", include_str!("../../examples/acrobot-impala.toml")),
    ("Pendulum-v1", include_str!("../../examples/pendulum-impala.toml")),
    ("LunarLander-v3", include_str!("../../examples/lunarlander-impala.toml")),
    ("ALE/Pong-v5", include_str!("../../examples/pong-impala-fast.toml")),
    ("ALE/Breakout-v5", include_str!("../../examples/breakout-impala-fast.toml")),
];

/// A config file (or an env's example) and the changes applied on top of it, in order: the
/// env, the seed, then each override.
///
/// ```
/// use impala::ConfigSource;
///
/// let source = ConfigSource {
///     env: Some("Acrobot-v1".into()),
///     seed: Some(7),
///     set: vec!["lr=0.001".into(), "model.fcnet_hiddens=[32]".into()],
///     ..Default::default()
/// };
/// let (config, _warnings) = source.load()?;
/// assert_eq!(config.config().env, "Acrobot-v1");
/// assert_eq!(config.config().model.fcnet_hiddens, vec![32]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSource {
    /// The config file (.toml, .yaml, .yml or .json); `None`: the example of the env.
    pub file: Option<PathBuf>,
    /// The environment id, in place of the config's `env`.
    pub env: Option<String>,
    /// The seed of every random number generator, in place of the config's `seed`.
    pub seed: Option<u64>,
    /// `key=value` overrides (`lr=0.001`, `model.fcnet_hiddens=[64,64]`), applied in order.
    pub set: Vec<String>,
}

impl ConfigSource {
    /// The file (or the example) with the changes, validated, and every warning.
    pub fn load(&self) -> Result<(ValidatedConfig, Vec<String>), ConfigError> {
        let loaded = match &self.file {
            Some(path) => ImpalaConfig::load(path)?,
            None => {
                let env = self.env.as_deref().unwrap_or(EXAMPLE_CONFIGS[0].0);
                let example = EXAMPLE_CONFIGS.iter().find(|(id, _)| *id == env);
                let (_, text) = example.unwrap_or(&EXAMPLE_CONFIGS[0]);
                ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?
            }
        };
        let warnings = loaded.warnings.iter().map(ToString::to_string).collect();
        self.apply(loaded.config, warnings)
    }

    /// The stop criteria the file gives, when it is an RLlib experiment file
    /// (`name: {env, run: IMPALA, stop: {...}, config: {...}}`); none otherwise.
    pub fn stop(&self) -> Result<crate::StopCriteria, ConfigError> {
        Ok(match &self.file {
            Some(path) => crate::StopCriteria::of_experiment(&ImpalaConfig::load(path)?.stop),
            None => crate::StopCriteria::default(),
        })
    }

    /// `config` (a checkpoint's, a search trial's) with the changes, validated, and every
    /// warning: those given (how the config was written), the overrides' and validation's.
    pub fn apply(
        &self,
        mut config: ImpalaConfig,
        mut warnings: Vec<String>,
    ) -> Result<(ValidatedConfig, Vec<String>), ConfigError> {
        if let Some(env) = &self.env {
            config.env.clone_from(env);
        }
        if let Some(seed) = self.seed {
            config.seed = Some(seed);
        }
        warnings.extend(config.apply_overrides(&self.set)?.iter().map(ToString::to_string));
        let config = config.validate()?;
        warnings.extend(config.warnings().iter().map(ToString::to_string));
        Ok((config, warnings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_example_loads_without_warnings() -> Result<(), ConfigError> {
        for (env, _) in EXAMPLE_CONFIGS {
            let source = ConfigSource { env: Some(env.into()), ..ConfigSource::default() };
            let (config, warnings) = source.load()?;
            assert_eq!(config.config().env, env);
            assert!(warnings.is_empty(), "{env}: {warnings:?}");
        }
        // An env with an example trains with its settings, any other with CartPole-v1's.
        let load =
            |env: &str| ConfigSource { env: Some(env.into()), ..ConfigSource::default() }.load();
        assert_eq!(load("LunarLander-v3")?.0.config().gamma, 0.999);
        let other = load("MountainCar-v0")?.0;
        assert_eq!(
            other.config().train_batch_size,
            load("CartPole-v1")?.0.config().train_batch_size
        );
        Ok(())
    }
}
