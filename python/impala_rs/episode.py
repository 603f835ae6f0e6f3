"""RLlib's episodes as its episode callbacks see them, over the episodes impala-rs' env runners
recorded (``Algorithm.take_episodes()``).

The callbacks run on the driver after the iteration (see :mod:`impala_rs.callbacks`), so an
episode here is a replay: one object per episode shown at a step ``t`` (after the reset, after
each step, whole at the end), its getters reading views of the recorded arrays, never copies.
:class:`SingleAgentEpisode` has RLlib's new-stack API and the old stack's (``custom_metrics``,
``user_data``, ``hist_data``, ``length``, ``total_reward``, ``last_*_for``) for
``DefaultCallbacks``; :class:`MultiAgentEpisode` the same per agent.

Observations are what the policy received (after the run's wrappers: normalised with
``normalize_observations``, stacked with ``model.framestack``), as float32; actions as sampled
(before clipping to the action space), int64 for ``Discrete`` and ``MultiDiscrete`` spaces;
rewards as the env gave them (before ``clip_rewards``). Infos are the env's own dicts, one per
observation (the reset's, then each step's), pickled in the env workers and unpickled when a
callback asks; native envs (``impala_rs.envs``) give empty ones, and so does the last step of an
Atari game (ale-py's vector env reports only the next game's info at that step).
"""

import pickle
import uuid

#: The agent id of a single-agent episode (RLlib old stack's ``_DUMMY_AGENT_ID``).
DEFAULT_AGENT_ID = "agent0"


class _Infos:
    """The infos of one agent's observations: ``{index: pickled info}`` for those not empty,
    unpickled once when first asked for."""

    def __init__(self, pickled):
        self._pickled = pickled or {}
        self._loaded = {}

    def upto(self, n):
        """The first ``n`` infos, a dict each."""
        out = [{} for _ in range(n)]
        for index, blob in self._pickled.items():
            if index < n:
                info = self._loaded.get(index)
                if info is None:
                    info = self._loaded[index] = pickle.loads(blob)
                out[index] = info
        return out


def _pick(values, indices):
    """RLlib's indices over ``values`` (those visible): ``None`` all of them, an int
    (negative from the end), a slice, or a list of ints."""
    if indices is None:
        return values
    if isinstance(indices, tuple):
        indices = list(indices)
    return values[indices]


def _pick_list(values, indices):
    """``_pick`` over a list, which numpy's list indices do not index."""
    if isinstance(indices, (list, tuple)):
        return [values[i] for i in indices]
    return _pick(values, indices)


class _Replay:
    """What both episode kinds share: the step shown, how the episode ended, where it was
    played, ``custom_data``, an id, and the old API stack's episode (``Episode``/``EpisodeV2``)
    for ``DefaultCallbacks``: ``custom_metrics`` (reduced into the result as
    ``custom_metrics/<key>_mean``, ``_min`` and ``_max``), ``hist_data`` (lists, into
    ``hist_stats/<key>``), ``user_data`` (anything), ``length`` and ``total_reward``."""

    def __init__(self, record, length):
        self._length = length
        self._terminated = record["terminated"]
        self._truncated = record["truncated"]
        #: The env's index among its env runner's envs.
        self.env_index = record["env_index"]
        #: The env runner that played it (0: sampling on the driver).
        self.runner_id = record["runner_id"]
        #: A dict for the callbacks' own data, kept across the hooks of this episode.
        self.custom_data = {}
        self.custom_metrics = {}
        self.user_data = {}
        self.hist_data = {}
        self._id = None
        self._t = 0
        self._reset = True

    def _show(self, t, reset=True):
        """Shows the episode after ``t`` env steps (before its reset without ``reset``)."""
        self._t = t
        self._reset = reset

    def _steps(self):
        """Shows each step in turn, for ``on_episode_step``."""
        for t in range(1, self._length + 1):
            self._t = t
            yield t

    def _show_end(self):
        """Shows the whole episode."""
        self._show(self._length)

    def __len__(self):
        return self._t

    @property
    def id_(self):
        """A unique id (a hex string, as RLlib's)."""
        if self._id is None:
            self._id = uuid.uuid4().hex
        return self._id

    @property
    def is_reset(self):
        """Whether the reset observation is in (false only in ``on_episode_created``)."""
        return self._reset

    @property
    def is_terminated(self):
        """Whether the step shown ended the episode in a terminal state."""
        return self._terminated and self._t == self._length

    @property
    def is_truncated(self):
        """Whether the step shown cut the episode short (a time limit)."""
        return self._truncated and self._t == self._length

    @property
    def is_done(self):
        """Whether the step shown ended the episode."""
        return self.is_terminated or self.is_truncated

    @property
    def length(self):
        """Env steps so far (the old stack's name)."""
        return self._t

    @property
    def total_reward(self):
        """The sum of the rewards so far (the old stack's name)."""
        return self.get_return()


class SingleAgentEpisode(_Replay):
    """RLlib's ``SingleAgentEpisode`` over one recorded episode (a dict of
    ``Algorithm.take_episodes()``), shown at env step ``t``: ``t + 1`` observations (none
    before the reset, in ``on_episode_created``), ``t`` actions and rewards.

    The getters take RLlib's ``indices``: ``None`` (all so far), an int (negative from the
    end), a list of ints or a slice; they return read-only numpy views."""

    def __init__(self, record):
        self._observations = record["observations"]
        self._actions = record["actions"]
        self._rewards = record["rewards"]
        self._infos = _Infos(record.get("infos"))
        super().__init__(record, len(self._rewards))

    @property
    def t(self):
        """The env step shown (RLlib's ``t``: the episode starts at 0)."""
        return self._t

    @property
    def t_started(self):
        """Where the episode started: 0 (whole episodes are recorded, never chunks)."""
        return 0

    def get_observations(self, indices=None):
        """The observations so far (``[t + 1, *obs_shape]`` float32), or those ``indices``
        picks."""
        return _pick(self._observations[: self._t + 1 if self._reset else 0], indices)

    def get_actions(self, indices=None):
        """The actions so far (``[t]``, or ``[t, *action_shape]``), or those ``indices``
        picks."""
        return _pick(self._actions[: self._t], indices)

    def get_rewards(self, indices=None):
        """The rewards so far (``[t]`` float32), or those ``indices`` picks."""
        return _pick(self._rewards[: self._t], indices)

    def get_infos(self, indices=None):
        """The env's infos so far, one dict per observation (the reset's first), or those
        ``indices`` picks."""
        return _pick_list(self._infos.upto(self._t + 1 if self._reset else 0), indices)

    def get_return(self):
        """The sum of the rewards so far."""
        return float(self._rewards[: self._t].sum())

    # The old stack's per-agent accessors; a single-agent episode's agent is
    # DEFAULT_AGENT_ID.

    def last_observation_for(self, agent_id=DEFAULT_AGENT_ID):
        """The last observation so far."""
        self._check_agent(agent_id)
        return self.get_observations(-1)

    def last_action_for(self, agent_id=DEFAULT_AGENT_ID):
        """The last action so far."""
        self._check_agent(agent_id)
        return self.get_actions(-1)

    def last_reward_for(self, agent_id=DEFAULT_AGENT_ID):
        """The last reward so far (0.0 before the first step, as RLlib's)."""
        self._check_agent(agent_id)
        return float(self._rewards[self._t - 1]) if self._t > 0 else 0.0

    def last_info_for(self, agent_id=DEFAULT_AGENT_ID):
        """The env's info of the last observation (None before the reset)."""
        self._check_agent(agent_id)
        infos = self.get_infos()
        return infos[-1] if infos else None

    def _check_agent(self, agent_id):
        if agent_id != DEFAULT_AGENT_ID:
            raise KeyError(f"agent {agent_id!r}: a single-agent episode's agent is {DEFAULT_AGENT_ID!r}")

    def __repr__(self):
        return f"SingleAgentEpisode(env_index={self.env_index}, t={self._t}, len={self._length})"


class _AgentTimeline:
    """One agent of a multi-agent record: its arrays and the env step of each observation."""

    def __init__(self, arrays):
        self.observations = arrays["observations"]
        self.actions = arrays["actions"]
        self.rewards = arrays["rewards"]
        self.env_steps = arrays["env_steps"]
        self.infos = _Infos(arrays.get("infos"))

    def counts(self, t, reset, whole):
        """How many observations, actions and rewards are in after env step ``t``."""
        if whole:
            return len(self.observations), len(self.actions), len(self.rewards)
        observed = int((self.env_steps <= t).sum()) if reset else 0
        # An action is in once the env stepped with it; its reward once the agent was next
        # observed (RLlib's hanging rewards wait the same way).
        acted = min(len(self.actions), int((self.env_steps < t).sum()) if reset else 0)
        rewarded = min(len(self.rewards), max(observed - 1, 0))
        return observed, acted, rewarded


class MultiAgentEpisode(_Replay):
    """RLlib's ``MultiAgentEpisode`` over one recorded multi-agent episode, shown at env step
    ``t``: per agent, the observations, actions and rewards in by then.

    The getters answer ``{agent_id: values}`` for the agents that took part so far (or those of
    ``agent_ids``), each agent's ``indices`` counting its own steps (RLlib's
    ``env_steps=False``; RLlib's default counts env steps, which agents observed at every step
    share). An agent's reward sums what it got from its action until it was next observed;
    ``get_return(include_hanging_rewards=True)`` of the whole episode also counts the rewards
    agents got with no action of theirs open (before they first acted)."""

    def __init__(self, record):
        self._agents = {agent_id: _AgentTimeline(arrays) for agent_id, arrays in record["agents"].items()}
        self._episode_return = record["episode_return"]
        super().__init__(record, record["length"])

    @property
    def env_t(self):
        """The env step shown (RLlib's ``env_t``)."""
        return self._t

    @property
    def env_t_started(self):
        """Where the episode started: 0."""
        return 0

    def _whole(self):
        return self._t == self._length and self._reset

    @property
    def agent_ids(self):
        """The agents that took part so far."""
        whole = self._whole()
        return {a for a, timeline in self._agents.items() if timeline.counts(self._t, self._reset, whole)[0] > 0}

    def _get(self, field, indices, agent_ids):
        whole = self._whole()
        ids = self._agents.keys() if agent_ids is None else [agent_ids] if isinstance(agent_ids, str) else agent_ids
        out = {}
        for agent_id in ids:
            timeline = self._agents.get(agent_id)
            if timeline is None:
                continue
            counts = timeline.counts(self._t, self._reset, whole)
            n = counts[0 if field == 3 else field]
            if n > 0:
                if field == 3:
                    out[agent_id] = _pick_list(timeline.infos.upto(n), indices)
                    continue
                values = (timeline.observations, timeline.actions, timeline.rewards)[field][:n]
                out[agent_id] = _pick(values, indices)
        return out

    def get_observations(self, indices=None, agent_ids=None):
        """Per agent, its observations so far (or those ``indices`` picks)."""
        return self._get(0, indices, agent_ids)

    def get_actions(self, indices=None, agent_ids=None):
        """Per agent, its actions so far (or those ``indices`` picks)."""
        return self._get(1, indices, agent_ids)

    def get_rewards(self, indices=None, agent_ids=None):
        """Per agent, its rewards so far (or those ``indices`` picks)."""
        return self._get(2, indices, agent_ids)

    def get_infos(self, indices=None, agent_ids=None):
        """Per agent, the env's infos for it so far, one dict per observation of the agent
        (or those ``indices`` picks)."""
        return self._get(3, indices, agent_ids)

    def get_return(self, include_hanging_rewards=False):
        """The sum of every agent's rewards so far; at the end with
        ``include_hanging_rewards``, the episode's return (also the rewards no action was open
        for)."""
        if include_hanging_rewards and self._whole():
            return float(self._episode_return)
        return float(sum(rewards.sum() for rewards in self.get_rewards().values()))

    def last_observation_for(self, agent_id):
        """Agent ``agent_id``'s last observation so far (None before it was observed)."""
        return self.get_observations(-1, [agent_id]).get(agent_id)

    def last_action_for(self, agent_id):
        """Agent ``agent_id``'s last action so far (None before it acted)."""
        return self.get_actions(-1, [agent_id]).get(agent_id)

    def last_reward_for(self, agent_id):
        """Agent ``agent_id``'s last reward so far (0.0 before it got one)."""
        reward = self.get_rewards(-1, [agent_id]).get(agent_id)
        return 0.0 if reward is None else float(reward)

    def last_info_for(self, agent_id):
        """The env's info of agent ``agent_id``'s last observation (None before it was
        observed)."""
        return self.get_infos(-1, [agent_id]).get(agent_id)

    def __repr__(self):
        return f"MultiAgentEpisode(env_index={self.env_index}, env_t={self._t}, len={self._length})"


def episode_of(record):
    """The episode of a record of ``Algorithm.take_episodes()``."""
    return MultiAgentEpisode(record) if "agents" in record else SingleAgentEpisode(record)


__all__ = ["DEFAULT_AGENT_ID", "MultiAgentEpisode", "SingleAgentEpisode", "episode_of"]
