"""HalfObserved written to PettingZoo's ParallelEnv API: two agents, ``left`` and ``right``, each
seeing one bit; both rewarded when their actions' parity is the bits' parity. A module of its own
so that Ray's workers can unpickle a creator that builds it."""

import numpy as np


class Coordination:
    """HalfObserved written to PettingZoo's ParallelEnv API, given to ``register_env``."""

    def __init__(self, config):
        import gymnasium as gym

        self.length = int(config.get("length", 10))
        self.possible_agents = ["left", "right"]
        self.agents = []
        self.space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng()
        self.bits, self.t = {}, 0

    def observation_space(self, agent):
        return self.space

    def action_space(self, agent):
        return self.space

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        self.bits = {a: int(self.rng.integers(2)) for a in self.agents}
        return dict(self.bits), {a: {"bit": b, "t": 0} for a, b in self.bits.items()}

    def step(self, actions):
        reward = float((actions["left"] ^ actions["right"]) == (self.bits["left"] ^ self.bits["right"]))
        self.t += 1
        self.bits = {a: int(self.rng.integers(2)) for a in self.possible_agents}
        done = self.t >= self.length
        agents, self.agents = self.agents, [] if done else self.agents
        return (
            dict(self.bits),
            {a: reward for a in agents},
            {a: done for a in agents},
            {a: False for a in agents},
            {a: {"bit": self.bits[a], "t": self.t} for a in agents},
        )
