"""A Lewis signalling game written to RLlib's ``MultiAgentEnv`` API (``possible_agents``,
per-agent space dicts, ``"__all__"``): each of 10 steps the ``speaker`` sees a random bit (one-hot,
Box(2)) and emits a symbol; the ``listener`` sees the symbol emitted the step before (one-hot,
Box(3): none, 0 or 1) and names a bit; both get 1 when it names the bit behind the symbol (9 a
game at best, 4.5 at random). A module of its own so that env workers can unpickle a creator that
builds it."""

import numpy as np


class Signaling:
    """The signalling game, given to ``register_env``."""

    def __init__(self, config=None):
        import gymnasium as gym

        self.possible_agents = ["speaker", "listener"]
        self.observation_spaces = {
            "speaker": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
            "listener": gym.spaces.Box(0.0, 1.0, (3,), np.float32),
        }
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self.rng = np.random.default_rng()
        self.bit, self.signalled, self.t = 0, None, 0

    def _observe(self, symbol):
        self.bit = int(self.rng.integers(2))
        speaker, listener = np.zeros(2, np.float32), np.zeros(3, np.float32)
        speaker[self.bit] = 1.0
        listener[0 if symbol is None else 1 + int(symbol)] = 1.0
        return {"speaker": speaker, "listener": listener}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.signalled, self.t = None, 0
        return self._observe(None), {}

    def step(self, action_dict):
        right = float(self.signalled is not None and int(action_dict["listener"]) == self.signalled)
        self.signalled = self.bit
        self.t += 1
        done = self.t >= 10
        obs = self._observe(action_dict["speaker"])
        rewards = {a: right for a in self.possible_agents}
        return obs, rewards, {"__all__": done}, {"__all__": False}, {}
