"""A tiny Gymnasium env for tests whose env workers should start fast: this module imports
nothing but Gymnasium (a creator defined in a test module would make every env worker import
that module's imports, Ray among them)."""

import gymnasium as gym


class Corridor(gym.Env):
    """Walk right to the end of a short corridor: +1 there, -0.1 per step before it (the
    shortest walk of 3 returns 0.8, a random walk about 0.2)."""

    def __init__(self, length=4, infos=False):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,))
        self.action_space = gym.spaces.Discrete(2)
        # With `infos`, infos that say where the walker is (for the episode callbacks' tests).
        self.infos = infos

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.t = 0, 0
        return [0.0], ({"start": True} if self.infos else {})

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        self.t += 1
        done = self.position >= self.length
        info = {}
        if self.infos:
            # Every few steps an empty info, which goes as none.
            info = {} if self.t % 3 == 0 else {"position": self.position, "t": self.t}
            if done:
                # A value that cannot be pickled arrives as its repr.
                info.update(goal=True, unpicklable=lambda: None)
        return [self.position / self.length], 1.0 if done else -0.1, done, False, info
