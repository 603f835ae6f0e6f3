"""Users' own Python envs: a gymnasium.Env class defined here, register_env creators (RLlib's
convention: the creator takes the env_config dict), stepped in env worker processes."""

import gymnasium as gym
import numpy as np
import pytest

from conftest import fast_cartpole
from impala_rs import ImpalaError, register_env, registered_envs


class Corridor(gym.Env):
    """Walk right (action 1) `length` cells for a reward of 1; a step left costs nothing."""

    def __init__(self, length=4, max_episode_steps=None):
        # `max_episode_steps` in env_config becomes a TimeLimit around the env.
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, float(length), (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([self.pos], np.float32), {}

    def step(self, action):
        self.pos = self.pos + 1 if action == 1 else max(self.pos - 1, 0)
        done = self.pos == self.length
        return np.array([self.pos], np.float32), float(done), done, False, {}


def corridor_config(env, **env_config):
    return (
        fast_cartpole()
        .environment(env, env_config=env_config)
        .env_runners(num_envs_per_env_runner=2)
    )


def test_a_python_env_class_trains():
    algo = corridor_config(Corridor, length=3, max_episode_steps=20).build()
    try:
        result = None
        for _ in range(10):
            result = algo.train()
        assert result["num_env_steps_sampled"] > 0
        assert result["episodes_total"] > 0
        # Solving the corridor is worth 1 per episode.
        assert result["episode_return_max"] == 1.0
    finally:
        algo.stop()


def test_register_env_creator_takes_env_config():
    def make_corridor(env_config):
        return Corridor(length=env_config["length"])

    register_env("corridor", make_corridor)
    assert "corridor" in registered_envs()
    algo = corridor_config("corridor", length=2, max_episode_steps=10).build()
    try:
        result = algo.train()
        assert result["episodes_total"] > 0
        assert result["episode_len_mean"] <= 10
    finally:
        algo.stop()


def test_a_creator_that_raises_is_a_clear_error():
    def broken(env_config):
        raise ValueError("no such corridor")

    register_env("broken", broken)
    with pytest.raises(ImpalaError, match="no such corridor"):
        corridor_config("broken").build()


def test_register_env_checks_its_arguments():
    with pytest.raises(TypeError, match="callable"):
        register_env("x", 3)
