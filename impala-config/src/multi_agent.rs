//! RLlib's `multi_agent()` options resolved against an env's agents: the policies, which agents
//! each policy acts for (`policy_mapping`: agent ids or `*` patterns to policy ids, the file form
//! of `policy_mapping_fn`) and which policies train. [`ImpalaConfig::policy_map`] turns them and
//! an env's agent ids into a [`PolicyMap`], refusing every inconsistency with the agent and the
//! policy named.

use serde::{Deserialize, Serialize};

use crate::{key_info, ConfigError, Group, ImpalaConfig, Origin};

/// What `train_batch_size` and the step counters count (RLlib's `count_steps_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountStepsBy {
    /// One per env step, however many agents acted.
    #[default]
    EnvSteps,
    /// One per agent that acted.
    AgentSteps,
}

/// Why a multi-agent setup does not fit its env, naming the agent and the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// The mapping sends an agent (or pattern) to a policy that is not in `policies`.
    #[error(
        "`multi_agent.policy_mapping` maps `{agent}` to policy `{policy}`, which is not in \
         `multi_agent.policies` ({known}); add it there or map `{agent}` to one of those"
    )]
    UnknownPolicy {
        /// The agent id or pattern.
        agent: String,
        /// The policy it names.
        policy: String,
        /// The policies there are, comma-separated.
        known: String,
    },
    /// No entry of the mapping matches an agent of the env.
    #[error(
        "agent `{agent}` of the env maps to no policy; add `{agent} = \"<policy>\"` (or a \
         matching `*` pattern) to `multi_agent.policy_mapping`"
    )]
    Unmapped {
        /// The agent id.
        agent: String,
    },
    /// Several patterns match one agent.
    #[error(
        "agent `{agent}` matches the patterns {patterns} of `multi_agent.policy_mapping`; \
         map `{agent}` by its own id, or make the patterns disjoint"
    )]
    Ambiguous {
        /// The agent id.
        agent: String,
        /// The patterns, quoted and comma-separated.
        patterns: String,
    },
    /// A policy that no agent of the env maps to: it would never act or learn.
    #[error(
        "no agent of the env maps to policy `{policy}` (agents: {agents}); map one to it in \
         `multi_agent.policy_mapping` or remove it from `multi_agent.policies`"
    )]
    UnusedPolicy {
        /// The policy id.
        policy: String,
        /// The env's agents, comma-separated.
        agents: String,
    },
    /// `policies_to_train` names a policy that is not in `policies`.
    #[error(
        "`multi_agent.policies_to_train` names `{policy}`, which is not in \
         `multi_agent.policies` ({known})"
    )]
    UnknownPolicyToTrain {
        /// The policy id.
        policy: String,
        /// The policies there are, comma-separated.
        known: String,
    },
    /// A policy id that cannot name a checkpoint folder.
    #[error(
        "policy id `{policy}` is not a plain name; use letters, digits, `_`, `-` and `.` (not \
         first)"
    )]
    InvalidPolicyId {
        /// The policy id.
        policy: String,
    },
    /// `policy_config` names a policy that is not in `policies`.
    #[error(
        "`multi_agent.policy_config` has an entry for `{policy}`, which is not in \
         `multi_agent.policies` ({known})"
    )]
    UnknownPolicyConfig {
        /// The policy id.
        policy: String,
        /// The policies there are, comma-separated.
        known: String,
    },
    /// A policy id given twice.
    #[error("`multi_agent.policies` names `{policy}` twice")]
    DuplicatePolicy {
        /// The policy id.
        policy: String,
    },
}

/// RLlib's `DEFAULT_POLICY_ID`: the one policy when `policies` is empty.
pub const DEFAULT_POLICY_ID: &str = "default_policy";

/// Which policy acts for each agent of an env and which policies learn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMap {
    /// The policy ids, in the config's order (`policies`, or `[default_policy]`).
    pub policy_ids: Vec<String>,
    /// Per agent of the env, in its order, the index in `policy_ids` of its policy.
    pub policy_of_agent: Vec<usize>,
    /// Per policy, whether it learns (`policies_to_train`).
    pub trains: Vec<bool>,
}

impl ImpalaConfig {
    /// The policy ids in order: `policies`, or `[default_policy]`.
    pub fn policy_ids(&self) -> Vec<String> {
        if self.policies.is_empty() {
            vec![DEFAULT_POLICY_ID.to_string()]
        } else {
            self.policies.clone()
        }
    }

    /// The config policy `policy_id` learns with: this one with the policy's `policy_config`
    /// entries set (`training()` options, and `model` as a table of model options merged into
    /// the run's). Other options are the run's for every policy, so setting one is an error.
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let mut config = ImpalaConfig::default();
    /// config.policies = vec!["small".into(), "big".into()];
    /// config.policy_config.insert(
    ///     "big".into(),
    ///     serde_json::from_str(r#"{"lr": 0.001, "model": {"fcnet_hiddens": [512]}}"#)?,
    /// );
    /// let big = config.for_policy("big")?;
    /// assert_eq!((big.lr, big.model.fcnet_hiddens.clone()), (0.001, vec![512]));
    /// assert_eq!(config.for_policy("small")?.lr, config.lr);
    /// config.policy_config.insert("small".into(), serde_json::from_str(r#"{"num_env_runners": 3}"#)?);
    /// assert!(config.for_policy("small").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_policy(&self, policy_id: &str) -> Result<ImpalaConfig, ConfigError> {
        let mut config = self.clone();
        let Some(entries) = self.policy_config.get(policy_id) else { return Ok(config) };
        for (key, value) in entries {
            let origin = Origin::Override(format!("policy_config.{policy_id}.{key}"));
            let refuse = |reason: &str| ConfigError::BadOverride {
                text: format!("policy_config.{policy_id}.{key}"),
                reason: reason.into(),
            };
            match (key.as_str(), value) {
                ("model", serde_json::Value::Object(model)) => {
                    for (model_key, v) in model {
                        config.set_from(&format!("model.{model_key}"), v.clone(), &origin)?;
                    }
                }
                ("model", _) => return Err(refuse("`model` takes a table of model options")),
                _ if key_info(key).is_some_and(|k| k.group == Group::Training) => {
                    config.set_from(key, value.clone(), &origin)?;
                }
                _ => {
                    return Err(refuse(
                        "only training() and model options can differ per policy; set the \
                         others for the run",
                    ))
                }
            }
        }
        Ok(config)
    }

    /// Whether any `multi_agent()` option differs from its default (a single-agent env refuses
    /// them).
    pub fn sets_multi_agent_options(&self) -> bool {
        !self.policies.is_empty()
            || !self.policy_mapping.is_empty()
            || self.policies_to_train.is_some()
            || self.count_steps_by != CountStepsBy::EnvSteps
            || !self.policy_config.is_empty()
    }

    /// The [`PolicyMap`] of an env whose agents are `agents` (ids, in its order).
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    ///
    /// let mut config = ImpalaConfig::default();
    /// config.policies = vec!["attacker".into(), "defender".into()];
    /// config.policy_mapping.insert("red_*".into(), "attacker".into());
    /// config.policy_mapping.insert("blue_*".into(), "defender".into());
    /// config.policy_mapping.insert("red_goalie".into(), "defender".into());
    /// config.policies_to_train = Some(vec!["attacker".into()]);
    /// let agents = ["red_0", "red_goalie", "blue_0"].map(String::from);
    /// let map = config.policy_map(&agents)?;
    /// assert_eq!(map.policy_of_agent, [0, 1, 1]);
    /// assert_eq!(map.trains, [true, false]);
    ///
    /// config.policy_mapping.insert("*0".into(), "attacker".into()); // red_0 now matches twice
    /// let refused = config.policy_map(&agents).err().map(|e| e.to_string()).unwrap_or_default();
    /// assert!(refused.contains("agent `red_0`"), "{refused}");
    /// # Ok::<(), impala_config::MappingError>(())
    /// ```
    pub fn policy_map(&self, agents: &[String]) -> Result<PolicyMap, MappingError> {
        let ids = self.policy_ids();
        let known = ids.join(", ");
        for (i, id) in ids.iter().enumerate() {
            let plain = id.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
            if id.is_empty() || id.starts_with('.') || !plain {
                return Err(MappingError::InvalidPolicyId { policy: id.clone() });
            }
            if ids[..i].contains(id) {
                return Err(MappingError::DuplicatePolicy { policy: id.clone() });
            }
        }
        let index = |agent: &str, policy: &str| {
            ids.iter().position(|p| p == policy).ok_or_else(|| MappingError::UnknownPolicy {
                agent: agent.to_string(),
                policy: policy.to_string(),
                known: known.clone(),
            })
        };
        // Every entry names a known policy, even one no agent of this env matches.
        for (agent, policy) in &self.policy_mapping {
            index(agent, policy)?;
        }
        let mut policy_of_agent = Vec::with_capacity(agents.len());
        for agent in agents {
            let policy = if let Some(policy) = self.policy_mapping.get(agent) {
                index(agent, policy)?
            } else {
                let matching: Vec<(&String, &String)> = self
                    .policy_mapping
                    .iter()
                    .filter(|(pattern, _)| pattern.contains('*') && matches(pattern, agent))
                    .collect();
                match matching.as_slice() {
                    [(pattern, policy)] => index(pattern, policy)?,
                    [] if self.policy_mapping.is_empty() && ids.len() == 1 => 0,
                    [] if self.policy_mapping.is_empty() => index(agent, agent)
                        .map_err(|_| MappingError::Unmapped { agent: agent.clone() })?,
                    [] => return Err(MappingError::Unmapped { agent: agent.clone() }),
                    several => {
                        let patterns: Vec<String> =
                            several.iter().map(|(p, _)| format!("`{p}`")).collect();
                        return Err(MappingError::Ambiguous {
                            agent: agent.clone(),
                            patterns: patterns.join(", "),
                        });
                    }
                }
            };
            policy_of_agent.push(policy);
        }
        for (p, policy) in ids.iter().enumerate() {
            if !policy_of_agent.contains(&p) {
                return Err(MappingError::UnusedPolicy {
                    policy: policy.clone(),
                    agents: agents.join(", "),
                });
            }
        }
        if let Some(unknown) = self.policy_config.keys().find(|p| !ids.contains(p)) {
            return Err(MappingError::UnknownPolicyConfig {
                policy: unknown.clone(),
                known: known.clone(),
            });
        }
        let trains = match &self.policies_to_train {
            None => vec![true; ids.len()],
            Some(to_train) => {
                if let Some(unknown) = to_train.iter().find(|p| !ids.contains(p)) {
                    return Err(MappingError::UnknownPolicyToTrain {
                        policy: unknown.clone(),
                        known,
                    });
                }
                ids.iter().map(|id| to_train.contains(id)).collect()
            }
        };
        Ok(PolicyMap { policy_ids: ids, policy_of_agent, trains })
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn refusal(config: &ImpalaConfig, agents: &[String]) -> String {
        match config.policy_map(agents) {
            Err(e) => e.to_string(),
            Ok(map) => panic!("accepted: {map:?}"),
        }
    }

    fn resolved(
        config: &ImpalaConfig,
        agents: &[String],
    ) -> Result<(Vec<usize>, Vec<bool>), MappingError> {
        config.policy_map(agents).map(|m| (m.policy_of_agent, m.trains))
    }

    fn with_policies(ids: &[&str]) -> ImpalaConfig {
        ImpalaConfig { policies: agents(ids), ..ImpalaConfig::default() }
    }

    #[test]
    fn patterns_match_with_wildcards_anywhere() {
        for (pattern, text, expected) in [
            ("agent_*", "agent_0", true),
            ("agent_*", "agent_", true),
            ("agent_*", "agen", false),
            ("*_0", "red_0", true),
            ("*_0", "red_1", false),
            ("r*d*0", "red_0", true),
            ("r*d*0", "rd0", true),
            ("a*a", "a", false),
            ("*", "anything", true),
            ("exact", "exact", true),
            ("exact", "exact_not", false),
        ] {
            assert_eq!(matches(pattern, text), expected, "{pattern} {text}");
        }
    }

    #[test]
    fn defaults_map_every_agent_to_the_one_policy_or_its_namesake() {
        let config = ImpalaConfig::default();
        assert!(!config.sets_multi_agent_options());
        assert_eq!(resolved(&config, &agents(&["a", "b"])), Ok((vec![0, 0], vec![true])));
        let named = with_policies(&["b", "a"]);
        assert!(named.sets_multi_agent_options());
        assert_eq!(resolved(&named, &agents(&["a", "b"])), Ok((vec![1, 0], vec![true, true])));
        assert_eq!(
            resolved(&named, &agents(&["a", "c"])),
            Err(MappingError::Unmapped { agent: "c".into() })
        );
    }

    #[test]
    fn every_inconsistency_names_the_agent_and_the_policy() {
        let mut setup = with_policies(&["p", "q"]);
        setup.policy_mapping.insert("a".into(), "p".into());
        setup.policy_mapping.insert("b".into(), "nope".into());
        let err = refusal(&setup, &agents(&["a", "b"]));
        assert!(err.contains("maps `b` to policy `nope`") && err.contains("(p, q)"), "{err}");

        setup.policy_mapping.insert("b".into(), "p".into());
        let err = refusal(&setup, &agents(&["a", "b"]));
        assert!(err.contains("no agent of the env maps to policy `q`"), "{err}");

        setup.policy_mapping.insert("b".into(), "q".into());
        let err = refusal(&setup, &agents(&["a", "b", "c"]));
        assert!(err.contains("agent `c` of the env maps to no policy"), "{err}");

        setup.policies_to_train = Some(agents(&["r"]));
        let err = refusal(&setup, &agents(&["a", "b"]));
        assert!(err.contains("policies_to_train` names `r`"), "{err}");

        assert_eq!(
            resolved(&with_policies(&["p", "p"]), &agents(&["a"])),
            Err(MappingError::DuplicatePolicy { policy: "p".into() })
        );
    }

    #[test]
    fn it_reads_from_a_config_file() -> Result<(), Box<dyn std::error::Error>> {
        let loaded = ImpalaConfig::from_str_as(
            r#"
            policies = ["left", "right"]
            policies_to_train = ["left"]
            count_steps_by = "agent_steps"
            [policy_mapping]
            left = "left"
            right = "right"
            "#,
            crate::ConfigFormat::Toml,
        )?;
        assert_eq!(loaded.config.count_steps_by, CountStepsBy::AgentSteps);
        let map = resolved(&loaded.config, &agents(&["left", "right"]))?;
        assert_eq!(map, (vec![0, 1], vec![true, false]));
        assert!(ImpalaConfig::from_str_as("polices = []", crate::ConfigFormat::Toml).is_err());
        Ok(())
    }
}
