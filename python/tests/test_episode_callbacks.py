"""RLlib's episode callbacks, replayed on the driver from the episodes the env runners recorded:
each hook, the episode API against the env's own rules, metrics into the result, the old
stack's ``DefaultCallbacks``, multi-agent episodes, errors that name the hook and the line, and
the env runners that cannot record refused."""

import numpy as np
import pytest
from conftest import fast_cartpole

import impala_rs
from impala_rs import DefaultCallbacks, IMPALAConfig, ImpalaError, RLlibCallback, _impala_rs
from impala_rs.episode import MultiAgentEpisode, SingleAgentEpisode


def train_once(config):
    with config.build_algo() as algo:
        return algo.train()


def test_on_episode_created_sees_each_episode_before_its_reset():
    seen = []

    class Created(RLlibCallback):
        def on_episode_created(self, *, episode, env_index, **kwargs):
            seen.append((episode.is_reset, len(episode), len(episode.get_observations()), env_index))

    result = train_once(fast_cartpole().callbacks(Created))
    assert len(seen) == result["num_episodes"] > 0
    assert all(s[:3] == (False, 0, 0) and 0 <= s[3] < 4 for s in seen)


def test_on_episode_start_sees_the_first_observation():
    starts = []

    class Start(RLlibCallback):
        def on_episode_start(self, *, episode, metrics_logger, **kwargs):
            starts.append(episode.get_observations())
            assert len(episode) == 0 and episode.t == 0 and not episode.is_done

    result = train_once(fast_cartpole().callbacks(Start))
    assert len(starts) == result["num_episodes"]
    # CartPole starts within 0.05 of upright and still.
    assert all(obs.shape == (1, 4) and np.all(np.abs(obs) <= 0.05) for obs in starts)


def test_on_episode_step_sees_each_step_and_custom_data_persists():
    class Steps(RLlibCallback):
        ended = []

        def on_episode_start(self, *, episode, **kwargs):
            episode.custom_data["steps"] = []

        def on_episode_step(self, *, episode, **kwargs):
            t = len(episode)
            assert episode.get_observations().shape == (t + 1, 4)
            assert episode.get_actions().shape == episode.get_rewards().shape == (t,)
            episode.custom_data["steps"].append((t, episode.is_done, episode.get_observations(-1)))

        def on_episode_end(self, *, episode, **kwargs):
            Steps.ended.append((episode.custom_data["steps"], episode.get_observations()))

    result = train_once(fast_cartpole().callbacks(Steps))
    assert len(Steps.ended) == result["num_episodes"]
    for steps, observations in Steps.ended:
        n = len(observations) - 1
        assert [t for t, _, _ in steps] == list(range(1, n + 1))
        # Only the last step ends the episode; each step's newest observation is the record's.
        assert [done for _, done, _ in steps] == [False] * (n - 1) + [True]
        assert all(np.array_equal(obs, observations[t]) for t, _, obs in steps)


def test_on_episode_end_sees_the_whole_episode_as_the_env_played_it():
    ended = []

    class End(RLlibCallback):
        def on_episode_end(self, *, episode, prev_episode_chunks, env_runner, env, rl_module, **kwargs):
            assert isinstance(episode, SingleAgentEpisode) and prev_episode_chunks == []
            assert env_runner is None and env is None and rl_module is None
            ended.append(episode)

    result = train_once(fast_cartpole().callbacks(End))
    assert len(ended) == result["num_episodes"] > 0
    # In the order they were counted: the last 100 are the result's smoothing window.
    assert np.mean([len(e) for e in ended[-100:]]) == pytest.approx(result["episode_len_mean"])
    for episode in ended:
        n = len(episode)
        observations, actions, rewards = episode.get_observations(), episode.get_actions(), episode.get_rewards()
        assert observations.shape == (n + 1, 4) and observations.dtype == np.float32
        assert actions.shape == (n,) and actions.dtype == np.int64 and set(actions) <= {0, 1}
        # CartPole pays 1 a step; its episodes end where the pole or the cart leaves its range
        # (terminated: the last observation shows it) or after 500 steps (truncated).
        assert rewards.tolist() == [1.0] * n and episode.get_return() == n == episode.total_reward
        x, theta = observations[-1][0], observations[-1][2]
        assert episode.is_done and episode.is_terminated == (abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360)
        assert episode.is_truncated == (n == 500)
        # RLlib's indices: negative, lists, slices; infos are empty dicts.
        assert np.array_equal(episode.get_observations(-1), observations[n])
        assert np.array_equal(episode.get_observations([0, -1]), observations[[0, n]])
        assert np.array_equal(episode.get_rewards(slice(1, 3)), rewards[1:3])
        assert episode.get_infos() == [{}] * (n + 1) and episode.get_infos(-1) == {}
        assert 0 <= episode.env_index < 4 and isinstance(episode.id_, str)


def test_values_logged_in_episode_hooks_land_under_env_runners():
    lengths = []

    class Logs(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger, **kwargs):
            lengths.append(len(episode))
            metrics_logger.log_value("episode_steps", len(episode), reduce="max")
            metrics_logger.log_value(("mine", "ended"), 1, reduce="sum", clear_on_reduce=True)

        def on_train_result(self, *, result, **kwargs):
            # As in RLlib, the result has the episodes' metrics by then.
            seen.append(result["env_runners"]["mine"]["ended"])

    seen = []
    with fast_cartpole().callbacks(Logs).build_algo() as algo:
        first, second = algo.train(), algo.train()
    assert seen == [first["num_episodes"], second["num_episodes"]]
    assert first["env_runners"]["mine"]["ended"] == first["num_episodes"]
    assert second["env_runners"]["mine"]["ended"] == second["num_episodes"]
    assert second["env_runners"]["episode_steps"] == max(lengths)


def test_default_callbacks_custom_metrics_land_as_mean_min_max():
    lengths = []

    class OldStack(DefaultCallbacks):
        def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kwargs):
            episode.user_data["start"] = episode.last_observation_for()
            episode.hist_data["steps"] = []

        def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
            assert worker is None and base_env is None and policies is None
            assert np.array_equal(episode.user_data["start"], episode.get_observations(0))
            assert episode.last_reward_for() == 1.0 and episode.last_action_for() in (0, 1)
            episode.custom_metrics["steps"] = episode.length
            episode.hist_data["steps"].append(episode.length)
            lengths.append(episode.length)

    with fast_cartpole().reporting(metrics_num_episodes_for_smoothing=1).callbacks(OldStack).build_algo() as algo:
        result = algo.train()
    # Over the iteration's episodes (more than the smoothing window of 1).
    metrics = result["custom_metrics"]
    assert len(lengths) == result["num_episodes"] > 1
    assert metrics == {"steps_mean": pytest.approx(np.mean(lengths)), "steps_min": min(lengths), "steps_max": max(lengths)}
    assert result["env_runners"]["custom_metrics"] == metrics
    assert result["env_runners"]["hist_stats"]["steps"] == lengths


def test_a_keyword_on_episode_end_is_called_per_episode_and_nothing_is_recorded_without_one():
    returns = []
    config = fast_cartpole().callbacks(on_episode_end=lambda *, episode, **kw: returns.append(episode.get_return()))
    result = train_once(config)
    assert np.mean(returns[-100:]) == pytest.approx(result["episode_return_mean"])
    with fast_cartpole().callbacks(on_train_result=lambda **kw: None).build_algo() as algo:
        algo.train()
        assert algo._native.take_episodes() == []


def left_and_right(env, callbacks, **env_config):
    """A two-agent env (``left`` and ``right``), a policy each, with ``callbacks``."""
    return (
        IMPALAConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4, rollout_fragment_length=10)
        .training(train_batch_size=80, model={"fcnet_hiddens": [16]})
        .multi_agent(policies={"left", "right"}, policy_mapping_fn=lambda agent_id, episode, **kw: agent_id)
        # Python env workers can take longer than the iteration's 0.3 s to start under load;
        # the iteration then waits for 400 env steps, so it always has whole episodes.
        .reporting(min_time_s_per_iteration=0.3, min_sample_timesteps_per_iteration=400)
        .callbacks(callbacks)
    )


def test_multi_agent_episodes_are_per_agent():
    class PerAgent(RLlibCallback):
        ended = []

        def on_episode_start(self, *, episode, **kwargs):
            episode.custom_data["steps"] = 0
            assert {a: len(o) for a, o in episode.get_observations().items()} == {"left": 1, "right": 1}

        def on_episode_step(self, *, episode, **kwargs):
            episode.custom_data["steps"] += 1
            t = len(episode)
            assert {a: len(r) for a, r in episode.get_actions().items()} == {"left": t, "right": t}

        def on_episode_end(self, *, episode, **kwargs):
            PerAgent.ended.append(episode)

    result = train_once(left_and_right("HalfObserved", PerAgent))
    assert len(PerAgent.ended) == result["num_episodes"] > 0
    for episode in PerAgent.ended:
        assert isinstance(episode, MultiAgentEpisode) and episode.agent_ids == {"left", "right"}
        assert len(episode) == 10 == episode.custom_data["steps"] and episode.is_done
        observations, rewards = episode.get_observations(), episode.get_rewards()
        # Each agent sees one bit (a Discrete(2) index).
        assert {a: o.shape for a, o in observations.items()} == {"left": (11,), "right": (11,)}
        assert set(np.unique(observations["left"])) <= {0.0, 1.0}
        # Both agents get each step's reward: the episode's return is twice each one's.
        assert np.array_equal(rewards["left"], rewards["right"])
        total = float(rewards["left"].sum() + rewards["right"].sum())
        assert episode.get_return() == total == episode.get_return(include_hanging_rewards=True)
        assert episode.last_reward_for("left") == rewards["left"][-1]
    returns = [e.get_return() for e in PerAgent.ended[-100:]]
    assert np.mean(returns) == pytest.approx(result["episode_return_mean"])


def test_get_infos_gives_the_env_s_infos_one_per_observation():
    from corridor import Corridor

    class Infos(RLlibCallback):
        ended = []

        def on_episode_start(self, *, episode, **kwargs):
            assert episode.get_infos() == [{"start": True}]

        def on_episode_step(self, *, episode, **kwargs):
            assert len(episode.get_infos()) == len(episode) + 1

        def on_episode_end(self, *, episode, **kwargs):
            Infos.ended.append(episode)

    config = (
        fast_cartpole()
        .environment(Corridor, env_config={"length": 3, "infos": True})
        .reporting(min_sample_timesteps_per_iteration=400)
        .callbacks(Infos)
    )
    result = train_once(config)
    # Four envs in one worker: most episodes begin at a reset made in the step that ended the
    # one before, whose info comes with that step.
    assert len(Infos.ended) == result["num_episodes"] > 4
    for episode in Infos.ended:
        infos, observations, n = episode.get_infos(), episode.get_observations(), len(episode)
        assert len(infos) == n + 1 and infos[0] == {"start": True}
        for t in range(1, n):
            expected = {} if t % 3 == 0 else {"position": round(observations[t][0] * 3), "t": t}
            assert infos[t] == expected
        last = infos[n]
        assert last["goal"] is True and last["unpicklable"].startswith("<function")
        assert episode.get_infos(-1) is last and episode.last_info_for() is last
        assert episode.get_infos([0, -1]) == [infos[0], last]


def test_get_infos_of_a_multi_agent_episode_are_per_agent():
    from coordination import Coordination

    impala_rs.register_env("coordination-infos", lambda config: Coordination(config))

    class Infos(RLlibCallback):
        ended = []

        def on_episode_end(self, *, episode, **kwargs):
            Infos.ended.append(episode)

    result = train_once(left_and_right("coordination-infos", Infos, length=5))
    assert len(Infos.ended) == result["num_episodes"] > 0
    for episode in Infos.ended:
        infos, observations = episode.get_infos(), episode.get_observations()
        for agent in ("left", "right"):
            # Each agent's info names the bit it observed, at each of its 6 observations.
            assert [i["t"] for i in infos[agent]] == list(range(6))
            assert [i["bit"] for i in infos[agent]] == observations[agent].astype(int).tolist()
        assert episode.last_info_for("left") == infos["left"][-1]
        assert episode.get_infos(0, ["right"]) == {"right": infos["right"][0]}


def test_a_raising_episode_callback_names_the_hook_and_the_line_and_the_algorithm_goes_on():
    raised = []

    class Broken(RLlibCallback):
        def on_episode_end(self, *, episode, **kwargs):
            if not raised:
                raised.append(True)
                raise ValueError("no such metric")

    with fast_cartpole().callbacks(Broken).build_algo() as algo:
        with pytest.raises(ValueError, match="no such metric") as error:
            algo.train()
        notes = getattr(error.value, "__notes__", [])
        assert any(
            "`on_episode_end` callback" in note and "Broken.on_episode_end" in note and f"{__file__}:" in note
            for note in notes
        ), notes
        assert algo.iteration == 1
        assert algo.train()["training_iteration"] == 2


def test_episode_callbacks_refuse_env_runners_that_cannot_record():
    config = (
        fast_cartpole()
        .env_runners(env_runner_backend="ray")
        .callbacks(on_episode_end=lambda **kw: None)
    )
    with pytest.raises(TypeError, match="need local env runners"):
        config.build_algo()
    # Remote env runners connecting to a server send no records either.
    native = fast_cartpole()._checked()
    server = _impala_rs.RunnerServer(native, "127.0.0.1:0", "0123456789abcdef0123")
    with pytest.raises(ImpalaError, match="need local env runners"):
        _impala_rs.Algorithm(native, None, server, None, True)
    server.finish("the test is over")
