//! Conversions between the sampler's types and the protocol's messages ([`proto`]), for the
//! gRPC sessions and for any transport that carries the same messages over another byte
//! stream. Decoding checks everything a peer could get wrong or forge (shapes against the env's
//! spec, lengths, finite values, sizes that would overflow), so nothing malformed reaches the
//! learner.
//!
//! ```
//! use impala_core::{EnvSpec, NamedTensor, Space, Weights};
//! use impala_remote::codec;
//!
//! let spec = EnvSpec {
//!     id: "CartPole-v1".into(),
//!     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
//!     action_space: Space::Discrete(2),
//!     max_episode_steps: Some(500),
//! };
//! assert_eq!(codec::spec_from_proto(Some(&codec::spec_to_proto(&spec)))?, spec);
//! let weights = Weights::new(3, vec![NamedTensor { name: "w".into(), shape: vec![2], data: vec![1.0, 2.0] }]);
//! let mut wire = codec::weights_to_proto(&weights);
//! assert_eq!(codec::weights_from_proto(wire.clone())?, weights);
//! wire.tensors[0].data[0] = f32::NAN;
//! assert!(codec::weights_from_proto(wire).is_err(), "non-finite weights are refused");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use impala_core::{
    AgentSpec, EnvSpec, EpisodeStats, MultiAgentSpec, NamedTensor, Observations, SampleBatch,
    Space, Weights,
};
use impala_sampler::{Fragment, MultiAgentFragment};

use crate::proto;
use crate::RemoteError;

/// Most env steps one fragment may hold (rows x steps); far above any real fragment, low
/// enough that sizes computed from it cannot overflow.
const MAX_FRAGMENT_STEPS: u64 = 1 << 24;

fn malformed(reason: impl Into<String>) -> RemoteError {
    RemoteError::Malformed(reason.into())
}

/// `e` with `context` in front of its reason, so a refusal says which part was malformed.
fn within(context: &str, e: RemoteError) -> RemoteError {
    match e {
        RemoteError::Malformed(reason) => malformed(format!("{context}: {reason}")),
        other => other,
    }
}

fn to_u64s(values: &[usize]) -> Vec<u64> {
    values.iter().map(|&v| v as u64).collect()
}

fn to_usizes(values: &[u64], what: &str) -> Result<Vec<usize>, RemoteError> {
    values
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| malformed(format!("{what} {v} is too large"))))
        .collect()
}

fn to_usize(value: u64, what: &str) -> Result<usize, RemoteError> {
    usize::try_from(value).map_err(|_| malformed(format!("{what} {value} is too large")))
}

// ---- spaces and specs ----

/// The wire form of a space.
fn space_to_proto(space: &Space) -> proto::Space {
    use proto::space::Kind;
    let kind = match space {
        Space::Discrete(n) => Kind::Discrete(*n as u64),
        Space::MultiDiscrete(nvec) => {
            Kind::MultiDiscrete(proto::MultiDiscrete { nvec: to_u64s(nvec) })
        }
        Space::Box { low, high, shape } => Kind::Box(proto::BoxSpace {
            low: low.clone(),
            high: high.clone(),
            shape: to_u64s(shape),
        }),
        Space::Bytes { shape } => Kind::Bytes(proto::BytesSpace { shape: to_u64s(shape) }),
    };
    proto::Space { kind: Some(kind) }
}

fn space_from_proto(space: Option<&proto::Space>, what: &str) -> Result<Space, RemoteError> {
    use proto::space::Kind;
    let kind =
        space.and_then(|s| s.kind.as_ref()).ok_or_else(|| malformed(format!("no {what}")))?;
    Ok(match kind {
        Kind::Discrete(n) => Space::Discrete(to_usize(*n, what)?),
        Kind::MultiDiscrete(m) => Space::MultiDiscrete(to_usizes(&m.nvec, what)?),
        Kind::Box(b) => Space::boxed(b.low.clone(), b.high.clone(), to_usizes(&b.shape, what)?)
            .map_err(|e| malformed(format!("{what}: {e}")))?,
        Kind::Bytes(b) => Space::Bytes { shape: to_usizes(&b.shape, what)? },
    })
}

/// The wire form of an env spec.
pub fn spec_to_proto(spec: &EnvSpec) -> proto::EnvSpec {
    proto::EnvSpec {
        id: spec.id.clone(),
        observation_space: Some(space_to_proto(&spec.observation_space)),
        action_space: Some(space_to_proto(&spec.action_space)),
        max_episode_steps: spec.max_episode_steps.map(|s| s as u64),
    }
}

/// An env spec from the wire.
pub fn spec_from_proto(spec: Option<&proto::EnvSpec>) -> Result<EnvSpec, RemoteError> {
    let spec = spec.ok_or_else(|| malformed("the welcome has no env spec"))?;
    Ok(EnvSpec {
        id: spec.id.clone(),
        observation_space: space_from_proto(spec.observation_space.as_ref(), "observation space")?,
        action_space: space_from_proto(spec.action_space.as_ref(), "action space")?,
        max_episode_steps: spec
            .max_episode_steps
            .map(|s| to_usize(s, "max_episode_steps"))
            .transpose()?,
    })
}

/// The wire form of a multi-agent env's spec and of its policies' specs (`policies`, in policy
/// order), for the welcome of a multi-agent run.
pub fn multi_agent_spec_to_proto(
    spec: &MultiAgentSpec,
    policies: &[EnvSpec],
) -> proto::MultiAgentSpec {
    proto::MultiAgentSpec {
        id: spec.id.clone(),
        agents: spec
            .agents
            .iter()
            .map(|a| proto::AgentSpec {
                id: a.id.clone(),
                observation_space: Some(space_to_proto(&a.observation_space)),
                action_space: Some(space_to_proto(&a.action_space)),
            })
            .collect(),
        max_episode_steps: spec.max_episode_steps.map(|s| s as u64),
        policies: policies.iter().map(spec_to_proto).collect(),
    }
}

/// A multi-agent env's spec and its policies' specs from the wire. Refused: no spec, agents
/// that [`MultiAgentSpec::new`] refuses (none, an empty or repeated id), bad spaces, no
/// policies, and a policy whose spaces are no agent's (no agent could act with it).
pub fn multi_agent_spec_from_proto(
    spec: Option<&proto::MultiAgentSpec>,
) -> Result<(MultiAgentSpec, Vec<EnvSpec>), RemoteError> {
    let spec = spec.ok_or_else(|| malformed("the welcome has no multi-agent spec"))?;
    let agents = spec
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(AgentSpec {
                id: a.id.clone(),
                observation_space: space_from_proto(
                    a.observation_space.as_ref(),
                    &format!("agent {i}'s observation space"),
                )?,
                action_space: space_from_proto(
                    a.action_space.as_ref(),
                    &format!("agent {i}'s action space"),
                )?,
            })
        })
        .collect::<Result<Vec<_>, RemoteError>>()?;
    let max_episode_steps =
        spec.max_episode_steps.map(|s| to_usize(s, "max_episode_steps")).transpose()?;
    let env = MultiAgentSpec::new(spec.id.clone(), agents, max_episode_steps)
        .map_err(|e| malformed(format!("multi-agent spec: {e}")))?;
    if spec.policies.is_empty() {
        return Err(malformed("the multi-agent spec has no policies"));
    }
    let policies = spec
        .policies
        .iter()
        .enumerate()
        .map(|(p, policy)| {
            let policy =
                spec_from_proto(Some(policy)).map_err(|e| within(&format!("policy {p}"), e))?;
            let acted = env.agents.iter().any(|a| {
                a.observation_space == policy.observation_space
                    && a.action_space == policy.action_space
            });
            if !acted {
                return Err(malformed(format!("policy {p}'s spaces are no agent's")));
            }
            Ok(policy)
        })
        .collect::<Result<Vec<_>, RemoteError>>()?;
    Ok((env, policies))
}

// ---- weights ----

/// The wire form of a weights snapshot, for policy 0; a multi-agent driver sets `policy` on it.
pub fn weights_to_proto(weights: &Weights) -> proto::SetWeights {
    proto::SetWeights {
        policy: 0,
        version: weights.version,
        tensors: weights
            .tensors
            .iter()
            .map(|t| proto::Tensor {
                name: t.name.clone(),
                shape: to_u64s(&t.shape),
                data: t.data.clone(),
            })
            .collect(),
    }
}

/// Weights from the wire: every tensor's values fill its shape and are finite.
pub fn weights_from_proto(weights: proto::SetWeights) -> Result<Weights, RemoteError> {
    let mut tensors = Vec::with_capacity(weights.tensors.len());
    for t in weights.tensors {
        let shape = to_usizes(&t.shape, "tensor dimension")?;
        let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if n != Some(t.data.len()) {
            return Err(malformed(format!(
                "weight `{}` has {} values for shape {shape:?}",
                t.name,
                t.data.len()
            )));
        }
        if t.data.iter().any(|v| !v.is_finite()) {
            return Err(malformed(format!("weight `{}` holds non-finite values", t.name)));
        }
        tensors.push(NamedTensor { name: t.name, shape, data: t.data });
    }
    Ok(Weights::new(weights.version, tensors))
}

// ---- fragments ----

fn observations_to_proto(obs: Observations, compress: bool) -> proto::Observations {
    use proto::observations::Kind;
    let kind = match obs {
        Observations::F32(values) => Kind::F32(proto::FloatValues { values }),
        Observations::Bytes(bytes) if compress => Kind::Bytes(proto::ByteValues {
            data: lz4_flex::block::compress(&bytes),
            lz4: true,
            len: bytes.len() as u64,
        }),
        Observations::Bytes(bytes) => {
            let len = bytes.len() as u64;
            Kind::Bytes(proto::ByteValues { data: bytes, lz4: false, len })
        }
    };
    proto::Observations { kind: Some(kind) }
}

/// Observations from the wire; `expected` is the number of values the batch's shape promises
/// (checked before decompressing, so a forged length cannot make us allocate).
fn observations_from_proto(
    obs: Option<proto::Observations>,
    expected: usize,
    what: &str,
) -> Result<Observations, RemoteError> {
    use proto::observations::Kind;
    let kind = obs.and_then(|o| o.kind).ok_or_else(|| malformed(format!("no {what}")))?;
    match kind {
        Kind::F32(f) => {
            if f.values.iter().any(|v| !v.is_finite()) {
                return Err(malformed(format!("{what} hold non-finite values")));
            }
            Ok(Observations::F32(f.values))
        }
        Kind::Bytes(b) if b.lz4 => {
            if b.len != expected as u64 {
                return Err(malformed(format!(
                    "{what}: {} bytes announced, the shape holds {expected}",
                    b.len
                )));
            }
            lz4_flex::block::decompress(&b.data, expected)
                .map(Observations::Bytes)
                .map_err(|e| malformed(format!("{what}: bad LZ4 data ({e})")))
        }
        Kind::Bytes(b) => Ok(Observations::Bytes(b.data)),
    }
}

fn flags_to_bytes(flags: &[bool]) -> Vec<u8> {
    flags.iter().map(|&f| u8::from(f)).collect()
}

fn flags_from_bytes(bytes: &[u8], what: &str) -> Result<Vec<bool>, RemoteError> {
    bytes
        .iter()
        .map(|&b| match b {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(malformed(format!("{what} holds {other}; flags are 0 or 1"))),
        })
        .collect()
}

fn episodes_to_proto(episodes: &[EpisodeStats]) -> Vec<proto::Episode> {
    episodes
        .iter()
        .map(|e| proto::Episode {
            episode_return: e.episode_return,
            episode_len: e.episode_len,
            truncated: e.truncated,
        })
        .collect()
}

/// Episodes from the wire; their returns are finite (they feed the run's metrics).
fn episodes_from_proto(episodes: Vec<proto::Episode>) -> Result<Vec<EpisodeStats>, RemoteError> {
    episodes
        .into_iter()
        .map(|e| {
            if !e.episode_return.is_finite() {
                return Err(malformed("an episode return is not finite"));
            }
            Ok(EpisodeStats {
                episode_return: e.episode_return,
                episode_len: e.episode_len,
                truncated: e.truncated,
            })
        })
        .collect()
}

/// The wire form of one batch (moved, not copied), with no episodes: single-agent fragments
/// add theirs, multi-agent ones carry them once for all policies.
fn batch_to_proto(b: SampleBatch, compress: bool) -> proto::Fragment {
    proto::Fragment {
        fragment_len: b.fragment_len as u64,
        num_rows: b.num_rows as u64,
        obs_shape: to_u64s(&b.obs_shape),
        action_dim: b.action_dim as u64,
        dist_inputs_dim: b.dist_inputs_dim as u64,
        state_dim: b.state_dim as u64,
        obs: Some(observations_to_proto(b.obs, compress)),
        actions: b.actions,
        rewards: b.rewards,
        terminateds: flags_to_bytes(&b.terminateds),
        truncateds: flags_to_bytes(&b.truncateds),
        action_logp: b.action_logp,
        action_dist_inputs: b.action_dist_inputs,
        vf_preds: b.vf_preds,
        truncation_values: b.truncation_values,
        bootstrap_obs: Some(observations_to_proto(b.bootstrap_obs, compress)),
        state_in: b.state_in,
        weights_version: b.weights_version,
        episodes: Vec::new(),
    }
}

/// One batch from the wire (its `episodes` are the caller's), checked against `spec`: the
/// observation shape and kind, the action widths, every length, finite values, and weights
/// versions no newer than `newest_version`. The one place a batch is validated.
fn batch_from_proto(
    f: proto::Fragment,
    spec: &EnvSpec,
    newest_version: Option<u64>,
) -> Result<SampleBatch, RemoteError> {
    let obs_shape = to_usizes(&f.obs_shape, "obs_shape")?;
    let env_shape = SampleBatch::obs_shape_of(&spec.observation_space);
    if obs_shape != env_shape {
        return Err(malformed(format!(
            "observation shape {obs_shape:?}, the env's is {env_shape:?}"
        )));
    }
    let expect_dim = |got: u64, want: usize, what: &str| {
        if got == want as u64 {
            Ok(want)
        } else {
            Err(malformed(format!("{what} is {got}, the env's action space needs {want}")))
        }
    };
    let action_dim = expect_dim(f.action_dim, spec.action_space.flat_dim(), "action_dim")?;
    let dist_inputs_dim =
        expect_dim(f.dist_inputs_dim, spec.action_space.dist_inputs_dim(), "dist_inputs_dim")?;
    let steps = f.fragment_len.checked_mul(f.num_rows).filter(|&n| n <= MAX_FRAGMENT_STEPS);
    let Some(steps) = steps else {
        return Err(malformed(format!(
            "{} rows of {} steps is more than a fragment may hold",
            f.num_rows, f.fragment_len
        )));
    };
    if f.state_dim > MAX_FRAGMENT_STEPS {
        return Err(malformed(format!("state_dim {} is too large", f.state_dim)));
    }
    let obs_dim: usize = obs_shape.iter().product();
    let (steps, rows) = (steps as usize, f.num_rows as usize);
    let obs = observations_from_proto(f.obs, steps * obs_dim, "observations")?;
    let bootstrap_obs = observations_from_proto(f.bootstrap_obs, rows * obs_dim, "bootstrap_obs")?;
    let want_bytes = matches!(spec.observation_space, Space::Bytes { .. });
    if want_bytes != matches!(obs, Observations::Bytes(_)) {
        return Err(malformed(format!(
            "observations are {}, the env's observation space is {}",
            obs.kind(),
            spec.observation_space
        )));
    }
    let floats: [(&str, &[f32]); 7] = [
        ("actions", &f.actions),
        ("rewards", &f.rewards),
        ("action_logp", &f.action_logp),
        ("action_dist_inputs", &f.action_dist_inputs),
        ("vf_preds", &f.vf_preds),
        ("truncation_values", &f.truncation_values),
        ("state_in", &f.state_in),
    ];
    for (what, values) in floats {
        if values.iter().any(|v| !v.is_finite()) {
            return Err(malformed(format!("{what} hold non-finite values")));
        }
    }
    if let Some(&v) = f.weights_version.iter().find(|&&v| newest_version.is_none_or(|n| v > n)) {
        return Err(malformed(format!(
            "a row acted with weights version {v}, newer than any the driver sent"
        )));
    }
    let batch = SampleBatch {
        fragment_len: f.fragment_len as usize,
        num_rows: rows,
        obs_shape,
        action_dim,
        dist_inputs_dim,
        state_dim: f.state_dim as usize,
        obs,
        actions: f.actions,
        rewards: f.rewards,
        terminateds: flags_from_bytes(&f.terminateds, "terminateds")?,
        truncateds: flags_from_bytes(&f.truncateds, "truncateds")?,
        action_logp: f.action_logp,
        action_dist_inputs: f.action_dist_inputs,
        vf_preds: f.vf_preds,
        truncation_values: f.truncation_values,
        bootstrap_obs,
        state_in: f.state_in,
        weights_version: f.weights_version,
    };
    batch.validate().map_err(|e| malformed(e.to_string()))?;
    Ok(batch)
}

/// The wire form of a fragment (moved, not copied); uint8 observations LZ4-compressed when
/// `compress`.
pub fn fragment_to_proto(fragment: Fragment, compress: bool) -> proto::Fragment {
    proto::Fragment {
        episodes: episodes_to_proto(&fragment.episodes),
        ..batch_to_proto(fragment.batch, compress)
    }
}

/// A fragment of runner `runner_id` from the wire, checked against the driver's `spec`: the
/// observation shape and kind, the action widths, every length, finite values, and weights
/// versions no newer than `newest_version` (the newest the driver sent).
pub fn fragment_from_proto(
    mut f: proto::Fragment,
    runner_id: usize,
    spec: &EnvSpec,
    newest_version: Option<u64>,
) -> Result<Fragment, RemoteError> {
    let episodes = std::mem::take(&mut f.episodes);
    let batch = batch_from_proto(f, spec, newest_version)?;
    // Remote runners record no episodes: the algorithm refuses episode recording with them.
    let episodes = episodes_from_proto(episodes)?;
    Ok(Fragment { runner_id, batch, episodes, episode_records: Vec::new() })
}

/// The wire form of a multi-agent fragment (moved, not copied): each policy's batch as a
/// single-agent one, uint8 observations LZ4-compressed when `compress`.
pub fn multi_agent_fragment_to_proto(
    fragment: MultiAgentFragment,
    compress: bool,
) -> proto::MultiAgentFragment {
    proto::MultiAgentFragment {
        batches: fragment.batches.into_iter().map(|b| batch_to_proto(b, compress)).collect(),
        env_steps: fragment.env_steps as u64,
        agent_steps: fragment.agent_steps as u64,
        episodes: episodes_to_proto(&fragment.episodes),
        policy_returns: fragment
            .policy_returns
            .into_iter()
            .map(|returns| proto::PolicyReturns { returns })
            .collect(),
    }
}

/// A multi-agent fragment of runner `runner_id` from the wire: one batch per policy of
/// `policies`, each checked as [`fragment_from_proto`] checks a single-agent one against that
/// policy's spec and newest weights version (`newest_versions[p]`; a policy past its end counts
/// as sent none); step counts bounded; finite episode returns; and one finite return per policy
/// per ended episode. Refusals name the policy.
pub fn multi_agent_fragment_from_proto(
    f: proto::MultiAgentFragment,
    runner_id: usize,
    policies: &[EnvSpec],
    newest_versions: &[Option<u64>],
) -> Result<MultiAgentFragment, RemoteError> {
    if f.batches.len() != policies.len() {
        return Err(malformed(format!(
            "{} batches for {} policies; a multi-agent fragment holds one per policy",
            f.batches.len(),
            policies.len()
        )));
    }
    for (what, steps) in [("env_steps", f.env_steps), ("agent_steps", f.agent_steps)] {
        if steps > MAX_FRAGMENT_STEPS {
            return Err(malformed(format!("{what} {steps} is more than a fragment may hold")));
        }
    }
    let batches = f
        .batches
        .into_iter()
        .zip(policies)
        .enumerate()
        .map(|(p, (batch, spec))| {
            let checked = if batch.episodes.is_empty() {
                batch_from_proto(batch, spec, newest_versions.get(p).copied().flatten())
            } else {
                Err(malformed("carries episodes; a multi-agent fragment carries them once"))
            };
            checked.map_err(|e| within(&format!("policy {p}'s batch"), e))
        })
        .collect::<Result<Vec<_>, RemoteError>>()?;
    let episodes = episodes_from_proto(f.episodes)?;
    if f.policy_returns.len() != episodes.len() {
        return Err(malformed(format!(
            "{} policy returns for {} episodes; one per ended episode",
            f.policy_returns.len(),
            episodes.len()
        )));
    }
    let policy_returns = f
        .policy_returns
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            if r.returns.len() != policies.len() {
                return Err(malformed(format!(
                    "episode {i}'s policy returns hold {} values for {} policies",
                    r.returns.len(),
                    policies.len()
                )));
            }
            if let Some(p) = r.returns.iter().position(|v| !v.is_finite()) {
                return Err(malformed(format!("episode {i}'s return of policy {p} is not finite")));
            }
            Ok(r.returns)
        })
        .collect::<Result<Vec<_>, RemoteError>>()?;
    Ok(MultiAgentFragment {
        runner_id,
        batches,
        env_steps: f.env_steps as usize,
        agent_steps: f.agent_steps as usize,
        episodes,
        policy_returns,
        episode_records: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(obs: Space) -> EnvSpec {
        EnvSpec {
            id: "Test-v0".into(),
            observation_space: obs,
            action_space: Space::Discrete(3),
            max_episode_steps: Some(10),
        }
    }

    fn fragment(obs: Observations, bootstrap: Observations, shape: Vec<usize>) -> Fragment {
        let (t, b) = (2, 3);
        let n = t * b;
        Fragment {
            runner_id: 7,
            batch: SampleBatch {
                fragment_len: t,
                num_rows: b,
                obs_shape: shape,
                action_dim: 1,
                dist_inputs_dim: 3,
                state_dim: 0,
                obs,
                actions: vec![1.0; n],
                rewards: (0..n).map(|i| i as f32).collect(),
                terminateds: vec![false, true, false, false, false, false],
                truncateds: vec![false, false, false, false, true, false],
                action_logp: vec![-0.5; n],
                action_dist_inputs: vec![0.1; n * 3],
                vf_preds: vec![0.25; n],
                truncation_values: vec![0.0; n],
                bootstrap_obs: bootstrap,
                state_in: vec![],
                weights_version: vec![4, 4, 5],
            },
            episodes: vec![EpisodeStats { episode_return: 12.5, episode_len: 9, truncated: true }],
            episode_records: vec![],
        }
    }

    /// A change that makes a good message malformed.
    type Forge<M> = Box<dyn Fn(&mut M)>;

    /// Asserts that `decode` refuses each case's forgery of `good` with a reason containing the
    /// case's text.
    fn assert_refused<M: Clone, T: std::fmt::Debug>(
        good: &M,
        cases: Vec<(&str, Forge<M>)>,
        decode: impl Fn(M) -> Result<T, RemoteError>,
    ) {
        for (expected, forge) in cases {
            let mut forged = good.clone();
            forge(&mut forged);
            match decode(forged) {
                Err(RemoteError::Malformed(reason)) => {
                    assert!(reason.contains(expected), "{expected}: got {reason}")
                }
                other => panic!("{expected}: accepted or wrong error: {other:?}"),
            }
        }
    }

    fn image_fragment() -> Fragment {
        let obs = Observations::Bytes((0..6 * 4).map(|i| (i % 3) as u8).collect());
        let boot = Observations::Bytes(vec![9; 3 * 4]);
        fragment(obs, boot, vec![2, 2, 1])
    }

    #[test]
    fn fragments_round_trip_with_and_without_compression() -> Result<(), RemoteError> {
        let s = spec(Space::Bytes { shape: vec![2, 2, 1] });
        let f = image_fragment();
        for compress in [false, true] {
            let back = fragment_from_proto(fragment_to_proto(f.clone(), compress), 2, &s, Some(5))?;
            assert_eq!(back.batch, f.batch);
            assert_eq!(back.episodes, f.episodes);
            assert_eq!(back.runner_id, 2, "the driver names the runner, not the wire");
        }
        // A discrete observation is one value per step in a batch (the index).
        let discrete = spec(Space::Discrete(4));
        let obs = Observations::F32(vec![3.0; 6]);
        let f = fragment(obs, Observations::F32(vec![1.0; 3]), vec![1]);
        let back = fragment_from_proto(fragment_to_proto(f.clone(), false), 2, &discrete, Some(5))?;
        assert_eq!(back.batch, f.batch);
        Ok(())
    }

    #[test]
    fn forged_fragments_are_rejected_with_the_reason() {
        let s = spec(Space::Bytes { shape: vec![2, 2, 1] });
        let good = fragment_to_proto(image_fragment(), true);
        let cases: Vec<(&str, Forge<proto::Fragment>)> = vec![
            ("observation shape", Box::new(|f| f.obs_shape = vec![4, 4, 1])),
            ("action_dim", Box::new(|f| f.action_dim = 2)),
            ("rewards hold non-finite", Box::new(|f| f.rewards[0] = f32::NAN)),
            ("more than a fragment may hold", Box::new(|f| f.num_rows = u64::MAX)),
            ("flags are 0 or 1", Box::new(|f| f.terminateds[0] = 7)),
            ("newer than any the driver sent", Box::new(|f| f.weights_version[0] = 6)),
            ("shape mismatch", Box::new(|f| f.rewards.pop().map_or((), drop))),
            (
                "bytes announced",
                Box::new(|f| {
                    if let Some(proto::observations::Kind::Bytes(b)) =
                        f.obs.as_mut().and_then(|o| o.kind.as_mut())
                    {
                        b.len = 1 << 40;
                    }
                }),
            ),
            (
                "bad LZ4",
                Box::new(|f| {
                    if let Some(proto::observations::Kind::Bytes(b)) =
                        f.obs.as_mut().and_then(|o| o.kind.as_mut())
                    {
                        b.data = vec![0xff; 5];
                    }
                }),
            ),
        ];
        assert_refused(&good, cases, |f| fragment_from_proto(f, 1, &s, Some(5)));
    }

    #[test]
    fn float_observations_must_be_finite_and_of_the_right_kind() {
        let s = spec(Space::Bytes { shape: vec![2] });
        let f =
            fragment(Observations::F32(vec![0.0; 12]), Observations::F32(vec![0.0; 6]), vec![2]);
        let err = fragment_from_proto(fragment_to_proto(f, false), 1, &s, Some(5));
        assert!(matches!(err, Err(RemoteError::Malformed(r)) if r.contains("observation space")));
        let s = spec(Space::continuous(vec![-1.0; 2], vec![1.0; 2]).expect("space"));
        let mut obs = vec![0.0; 12];
        obs[3] = f32::INFINITY;
        let f = fragment(Observations::F32(obs), Observations::F32(vec![0.0; 6]), vec![2]);
        let err = fragment_from_proto(fragment_to_proto(f, false), 1, &s, Some(5));
        assert!(matches!(err, Err(RemoteError::Malformed(r)) if r.contains("non-finite")));
    }

    #[test]
    fn specs_and_weights_round_trip_and_bad_weights_are_refused() -> Result<(), RemoteError> {
        let s = EnvSpec {
            id: "X".into(),
            observation_space: Space::boxed(vec![-1.0; 4], vec![1.0; 4], vec![2, 2])
                .map_err(|e| RemoteError::Malformed(e.to_string()))?,
            action_space: Space::MultiDiscrete(vec![2, 3]),
            max_episode_steps: None,
        };
        assert_eq!(spec_from_proto(Some(&spec_to_proto(&s)))?, s);

        let w = Weights::new(
            3,
            vec![NamedTensor { name: "a".into(), shape: vec![2], data: vec![1.0, 2.0] }],
        );
        assert_eq!(weights_from_proto(weights_to_proto(&w))?, w);
        let mut bad = weights_to_proto(&w);
        bad.tensors[0].data[1] = f32::NAN;
        assert!(weights_from_proto(bad).is_err());
        let mut bad = weights_to_proto(&w);
        bad.tensors[0].shape = vec![u64::MAX, 2];
        assert!(weights_from_proto(bad).is_err());
        Ok(())
    }

    /// A float-observation policy and a uint8-image one, both acting in `Discrete(3)`.
    fn policies() -> Vec<EnvSpec> {
        let floats = Space::continuous(vec![-1.0; 2], vec![1.0; 2]).expect("space");
        vec![spec(floats), spec(Space::Bytes { shape: vec![2, 2, 1] })]
    }

    /// Two episodes over [`policies`], policy `empty`'s batch holding no complete row.
    fn multi_agent_fragment(empty: usize) -> MultiAgentFragment {
        let obs = Observations::F32((0..12).map(|i| i as f32 / 12.0).collect());
        let floats = fragment(obs, Observations::F32(vec![0.5; 6]), vec![2]).batch;
        let mut batches = vec![floats, image_fragment().batch];
        let s = &policies()[empty];
        batches[empty] = SampleBatch::zeros(2, 0, &s.observation_space, &s.action_space, 0);
        MultiAgentFragment {
            runner_id: 7,
            batches,
            env_steps: 6,
            agent_steps: 9,
            episodes: vec![
                EpisodeStats { episode_return: -0.5, episode_len: 4, truncated: false },
                EpisodeStats { episode_return: 3.25, episode_len: 10, truncated: true },
            ],
            policy_returns: vec![vec![1.5, -2.0], vec![0.0, 3.25]],
            episode_records: vec![],
        }
    }

    #[test]
    fn multi_agent_fragments_round_trip_with_and_without_compression() -> Result<(), RemoteError> {
        let policies = policies();
        for empty in [0, 1] {
            let f = multi_agent_fragment(empty);
            assert_eq!(f.batches[empty].num_rows, 0);
            for compress in [false, true] {
                let wire = multi_agent_fragment_to_proto(f.clone(), compress);
                assert!(wire.batches.iter().all(|b| b.episodes.is_empty()));
                let back = multi_agent_fragment_from_proto(wire, 2, &policies, &[Some(5); 2])?;
                assert_eq!(back, MultiAgentFragment { runner_id: 2, ..f.clone() });
            }
        }
        Ok(())
    }

    #[test]
    fn forged_multi_agent_fragments_are_rejected_with_the_reason() {
        let policies = policies();
        // Policy 0's rows acted with versions 4 and 5; policy 1 has newer weights than that.
        let newest = [Some(5), Some(9)];
        let good = multi_agent_fragment_to_proto(multi_agent_fragment(1), true);
        assert!(multi_agent_fragment_from_proto(good.clone(), 1, &policies, &newest).is_ok());
        let cases: Vec<(&str, Forge<proto::MultiAgentFragment>)> = vec![
            ("1 batches for 2 policies", Box::new(|f| f.batches.truncate(1))),
            (
                "policy 0's batch: observation shape [2, 2, 1]",
                Box::new(|f| f.batches[0].obs_shape = vec![2, 2, 1]),
            ),
            (
                "policy 0's batch: a row acted with weights version 6",
                Box::new(|f| f.batches[0].weights_version[0] = 6),
            ),
            (
                "policy 1's batch: carries episodes",
                Box::new(|f| f.batches[1].episodes = f.episodes.clone()),
            ),
            ("1 policy returns for 2 episodes", Box::new(|f| f.policy_returns.truncate(1))),
            (
                "episode 1's policy returns hold 3 values for 2 policies",
                Box::new(|f| f.policy_returns[1].returns.push(0.0)),
            ),
            (
                "episode 0's return of policy 1 is not finite",
                Box::new(|f| f.policy_returns[0].returns[1] = f64::NAN),
            ),
            (
                "an episode return is not finite",
                Box::new(|f| f.episodes[1].episode_return = f64::INFINITY),
            ),
            ("agent_steps", Box::new(|f| f.agent_steps = u64::MAX)),
        ];
        assert_refused(&good, cases, |f| multi_agent_fragment_from_proto(f, 1, &policies, &newest));
    }

    #[test]
    fn multi_agent_specs_round_trip_and_forged_ones_are_refused() -> Result<(), RemoteError> {
        let policies = policies();
        let agent = |id: &str, policy: &EnvSpec| AgentSpec {
            id: id.into(),
            observation_space: policy.observation_space.clone(),
            action_space: policy.action_space.clone(),
        };
        let agents =
            vec![agent("a", &policies[0]), agent("b", &policies[1]), agent("c", &policies[1])];
        let env = MultiAgentSpec::new("Test-v0", agents, Some(10))
            .map_err(|e| RemoteError::Malformed(e.to_string()))?;
        let good = multi_agent_spec_to_proto(&env, &policies);
        assert_eq!(multi_agent_spec_from_proto(Some(&good))?, (env, policies));

        let cases: Vec<(&str, Forge<proto::MultiAgentSpec>)> = vec![
            ("no policies", Box::new(|s| s.policies.clear())),
            ("names agent `a` twice", Box::new(|s| s.agents[2].id = "a".into())),
            ("has no agents", Box::new(|s| s.agents.clear())),
            ("empty id", Box::new(|s| s.agents[1].id.clear())),
            ("no agent 1's action space", Box::new(|s| s.agents[1].action_space = None)),
            (
                "policy 1's spaces are no agent's",
                Box::new(|s| s.policies[1].action_space = s.policies[0].observation_space.clone()),
            ),
        ];
        assert_refused(&good, cases, |s| multi_agent_spec_from_proto(Some(&s)));
        let missing = multi_agent_spec_from_proto(None);
        assert!(matches!(missing, Err(RemoteError::Malformed(r)) if r.contains("no multi-agent")));
        Ok(())
    }
}
