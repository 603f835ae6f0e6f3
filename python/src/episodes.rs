//! Recorded episodes ([`impala::core::EpisodeRecord`]) as the dicts of numpy arrays the
//! package's episode callbacks replay (`impala_rs.episode`).

use impala::core::{AgentRecord, EpisodeRecord, Observations, Space};
use impala::Impala;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySlice, PyTuple};

/// How one agent's arrays are shaped and typed: its id and spaces.
struct AgentLayout {
    id: String,
    observation_shape: Vec<usize>,
    action_space: Space,
}

/// What an algorithm's records look like in Python: a single-agent env's one agent, or a
/// multi-agent env's agents by their index in its spec.
pub(crate) struct EpisodeLayout {
    multi_agent: bool,
    agents: Vec<AgentLayout>,
}

impl EpisodeLayout {
    /// The layout of `algo`'s records: the spaces its policies act in (after the run's
    /// wrappers), as the runners recorded them.
    pub(crate) fn of(algo: &Impala) -> Self {
        let layout = |id: &str, observations: &Space, actions: &Space| AgentLayout {
            id: id.to_string(),
            observation_shape: observations.shape(),
            action_space: actions.clone(),
        };
        match algo.multi_agent_spec() {
            Some(spec) => EpisodeLayout {
                multi_agent: true,
                agents: spec
                    .agents
                    .iter()
                    .map(|a| layout(&a.id, &a.observation_space, &a.action_space))
                    .collect(),
            },
            None => {
                let spec = algo.env_spec();
                let agent = layout("", &spec.observation_space, &spec.action_space);
                EpisodeLayout { multi_agent: false, agents: vec![agent] }
            }
        }
    }

    /// `records` as a list of dicts: a single-agent episode's `observations` (float32,
    /// `[len + 1, *obs_shape]`), `actions` (int64 for (Multi)Discrete, float32 otherwise,
    /// `[len, *action_shape]`), `rewards` (float32 `[len]`); a multi-agent episode's `agents`
    /// (`{agent_id: {observations, actions, rewards, env_steps}}`), `episode_return` and
    /// `length`; both with `terminated`, `truncated`, `env_index` and `runner_id`.
    ///
    /// Each agent's field is one array over every record, and each episode's entry a view of
    /// its rows: a few numpy calls for all the episodes, then a slice per episode and field.
    pub(crate) fn to_python<'py>(
        &self,
        py: Python<'py>,
        records: Vec<EpisodeRecord>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut of_agent: Vec<Vec<&AgentRecord>> = vec![Vec::new(); self.agents.len()];
        for record in &records {
            if !self.multi_agent && record.agents.len() != 1 {
                return Err(broken(format!(
                    "a single-agent episode record holds {} agents",
                    record.agents.len()
                )));
            }
            for agent in &record.agents {
                let Some(list) = of_agent.get_mut(agent.agent) else {
                    return Err(broken(format!(
                        "a record names agent {}, not in the env",
                        agent.agent
                    )));
                };
                list.push(agent);
            }
        }
        let numpy = Numpy::new(py)?;
        let mut columns = self
            .agents
            .iter()
            .zip(&of_agent)
            .map(|(layout, agents)| Columns::new(&numpy, layout, agents, self.multi_agent))
            .collect::<PyResult<Vec<_>>>()?;
        let list = PyList::empty(py);
        for record in &records {
            let episode = PyDict::new(py);
            if self.multi_agent {
                let agents = PyDict::new(py);
                for agent in &record.agents {
                    let arrays = PyDict::new(py);
                    columns[agent.agent].next_into(&arrays, agent)?;
                    agents.set_item(&self.agents[agent.agent].id, arrays)?;
                }
                episode.set_item("agents", agents)?;
                episode.set_item("episode_return", record.stats.episode_return)?;
                episode.set_item("length", record.stats.episode_len)?;
            } else {
                for agent in &record.agents {
                    columns[0].next_into(&episode, agent)?;
                }
            }
            episode.set_item("terminated", record.terminated())?;
            episode.set_item("truncated", record.stats.truncated)?;
            episode.set_item("env_index", record.env_index)?;
            episode.set_item("runner_id", record.runner_id)?;
            list.append(episode)?;
        }
        Ok(list)
    }
}

/// One agent's fields over every record, and where the next record's rows start.
struct Columns<'py> {
    observations: Bound<'py, PyAny>,
    actions: Bound<'py, PyAny>,
    rewards: Bound<'py, PyAny>,
    /// Multi-agent episodes: the env step of each observation.
    env_steps: Option<Bound<'py, PyAny>>,
    /// Values of one observation.
    observation_len: usize,
    /// Rows taken so far: observations, and actions (one reward each).
    observed: usize,
    acted: usize,
}

impl<'py> Columns<'py> {
    /// The arrays of `agents` (one agent's part of each record, in order).
    fn new(
        numpy: &Numpy<'py>,
        layout: &AgentLayout,
        agents: &[&AgentRecord],
        multi_agent: bool,
    ) -> PyResult<Self> {
        let total = |len: fn(&AgentRecord) -> usize| agents.iter().map(|a| len(a)).sum::<usize>();
        let observations = numpy.array(
            DType::Float32,
            &layout.observation_shape,
            total(|a| a.observations.len()),
            |out| {
                for agent in agents {
                    match &agent.observations {
                        Observations::F32(values) => {
                            out.put(values.iter().map(|v| v.to_ne_bytes()))
                        }
                        Observations::Bytes(values) => {
                            out.put(values.iter().map(|&b| f32::from(b).to_ne_bytes()))
                        }
                    }
                }
            },
        )?;
        let action_shape = layout.action_space.shape();
        let action_values = total(|a| a.actions.len());
        let actions = if layout.action_space.is_discrete() {
            // Indices are whole f32 values (exact up to 2^24).
            numpy.array(DType::Int64, &action_shape, action_values, |out| {
                for agent in agents {
                    out.put(agent.actions.iter().map(|&a| (a as i64).to_ne_bytes()));
                }
            })?
        } else {
            numpy.array(DType::Float32, &action_shape, action_values, |out| {
                for agent in agents {
                    out.put(agent.actions.iter().map(|a| a.to_ne_bytes()));
                }
            })?
        };
        let rewards = numpy.array(DType::Float32, &[], total(|a| a.rewards.len()), |out| {
            for agent in agents {
                out.put(agent.rewards.iter().map(|r| r.to_ne_bytes()));
            }
        })?;
        let env_steps = multi_agent
            .then(|| {
                numpy.array(DType::Int64, &[], total(|a| a.observed_at.len()), |out| {
                    for agent in agents {
                        out.put(agent.observed_at.iter().map(|&s| (s as i64).to_ne_bytes()));
                    }
                })
            })
            .transpose()?;
        let observation_len = layout.observation_shape.iter().product::<usize>().max(1);
        Ok(Columns {
            observations,
            actions,
            rewards,
            env_steps,
            observation_len,
            observed: 0,
            acted: 0,
        })
    }

    /// Puts views of `agent`'s rows (the next record's part) into `dict`: `observations`,
    /// `actions`, `rewards`, for a multi-agent episode `env_steps`, and where any observation
    /// came with an info, `infos` (`{observation index: pickled info}`).
    fn next_into(&mut self, dict: &Bound<'py, PyDict>, agent: &AgentRecord) -> PyResult<()> {
        let py = dict.py();
        let observed = self.observed + agent.observations.len() / self.observation_len;
        let acted = self.acted + agent.rewards.len();
        let rows = |array: &Bound<'py, PyAny>, start: usize, stop: usize| {
            array.get_item(PySlice::new(py, start as isize, stop as isize, 1))
        };
        dict.set_item("observations", rows(&self.observations, self.observed, observed)?)?;
        dict.set_item("actions", rows(&self.actions, self.acted, acted)?)?;
        dict.set_item("rewards", rows(&self.rewards, self.acted, acted)?)?;
        if let Some(env_steps) = &self.env_steps {
            dict.set_item("env_steps", rows(env_steps, self.observed, observed)?)?;
        }
        if !agent.infos.is_empty() {
            // Sparse: only the observations whose info is not empty, unpickled when asked for.
            let infos = PyDict::new(py);
            for (index, info) in &agent.infos {
                infos.set_item(index, PyBytes::new(py, info))?;
            }
            dict.set_item("infos", infos)?;
        }
        (self.observed, self.acted) = (observed, acted);
        Ok(())
    }
}

/// An array's bytes, filled from the front.
struct Fill<'b> {
    buffer: &'b mut [u8],
    filled: usize,
}

impl Fill<'_> {
    /// Writes `values` next (each value's bytes, as many as fit).
    fn put<const N: usize>(&mut self, values: impl Iterator<Item = [u8; N]>) {
        // One contiguous slice, so the copies vectorise.
        let rest = self.buffer.get_mut(self.filled..).unwrap_or_default();
        let mut written = 0;
        for (chunk, value) in rest.chunks_exact_mut(N).zip(values) {
            chunk.copy_from_slice(&value);
            written += N;
        }
        self.filled += written;
    }
}

/// The element types of the arrays.
#[derive(Clone, Copy)]
enum DType {
    Float32,
    Int64,
}

/// numpy arrays filled from Rust: bytes viewed by `numpy.frombuffer` (read-only).
struct Numpy<'py> {
    py: Python<'py>,
    frombuffer: Bound<'py, PyAny>,
}

impl<'py> Numpy<'py> {
    fn new(py: Python<'py>) -> PyResult<Self> {
        Ok(Numpy { py, frombuffer: py.import("numpy")?.getattr("frombuffer")? })
    }

    /// A `dtype` array `[-1, *shape]` of `len` values that `fill` puts, in order.
    fn array(
        &self,
        dtype: DType,
        shape: &[usize],
        len: usize,
        fill: impl FnOnce(&mut Fill<'_>),
    ) -> PyResult<Bound<'py, PyAny>> {
        let (name, width) = match dtype {
            DType::Float32 => ("float32", 4),
            DType::Int64 => ("int64", 8),
        };
        let bytes = PyBytes::new_with(self.py, len * width, |buffer| {
            fill(&mut Fill { buffer, filled: 0 });
            Ok(())
        })?;
        let flat = self.frombuffer.call1((bytes, name))?;
        // -1: as many rows as the values fill.
        let rows_then_shape: Vec<i64> =
            std::iter::once(-1).chain(shape.iter().map(|&d| d as i64)).collect();
        flat.call_method1("reshape", (PyTuple::new(self.py, rows_then_shape)?,))
    }
}

/// A record that does not fit the algorithm it came from: a bug, reported rather than
/// panicking.
fn broken(reason: String) -> PyErr {
    crate::errors::ImpalaError::new_err(format!("episode records: {reason}"))
}
