"""Small Gymnasium envs for impala-gym's tests (and impala's end-to-end tests)."""

import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MatchBit(gym.Env):
    """Each step shows a random bit; acting with the same bit pays 1. Episodes last `length`
    steps, so the optimum return is `length` and a random policy gets half of it."""

    def __init__(self, length=10):
        self.length = int(length)
        self.observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.bit = 0

    def _obs(self):
        obs = np.zeros(2, np.float32)
        obs[self.bit] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.bit = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self.bit else 0.0
        self.t += 1
        self.bit = int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= self.length, {}


class Tagged(gym.Env):
    """Episodes of 3 steps whose infos are tagged `reset` and `step-<t>`: for infos carried
    to the runner."""

    def __init__(self):
        self.observation_space = spaces.Box(0.0, 3.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"tag": "reset"}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 0.0, self.t >= 3, False, {"tag": f"step-{self.t}"}


class CoinBit(gym.Env):
    """Nothing to learn: the observation is one of 4 states drawn at random, one-hot (Box(4), as
    CartPole's, so CartPole's custom models fit), the reward a fair coin (0 or 1) whatever the
    action; episodes end (terminate) after `length` steps. A policy with an entropy bonus must
    stay near uniform here."""

    def __init__(self, length=10):
        self.observation_space = spaces.Box(0.0, 1.0, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.length = int(length)
        self.rng = np.random.default_rng()
        self.t = 0

    def _obs(self):
        obs = np.zeros(4, np.float32)
        obs[int(self.rng.integers(4))] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.rng.integers(2)), self.t >= self.length, False, {}


class Faulty(gym.Env):
    """Counts steps in its observation; after `after` steps of its life (over all episodes) it
    raises, hangs, dies or prints, as `mode` says (`raise`, `raise_on_reset`, `hang`, `die`,
    `print`, `none`). With `once` (a file path) only the first env of the whole run to get
    there faults: it claims the file, and restarted envs then run clean. Episodes last 20 steps;
    the reward is the action."""

    def __init__(self, mode="none", after=5, once=None):
        self.mode, self.after = mode, int(after)
        self.once = once
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.t = 0
        self.total = 0
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.mode == "raise_on_reset" and self.resets > 1:
            raise RuntimeError("reset failed on purpose")
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        if self.total == self.after + 1 and self.once is not None:
            try:
                os.close(os.open(self.once, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                self.mode = "none"
        if self.total > self.after:
            if self.mode == "raise":
                raise ValueError(f"step {self.t} failed on purpose")
            if self.mode == "hang":
                time.sleep(3600)
            if self.mode == "die":
                os._exit(3)
            if self.mode == "print":
                print("a user's print on stdout", self.t)
        return np.array([float(self.t)], np.float32), float(action), False, self.t >= 20, {}


class Spaces(gym.Env):
    """Every supported space: a Dict observation (Box, Discrete, MultiBinary) and an action
    space chosen by `action` (`box`, `multi_discrete`, `multi_binary`). The observation's Box
    part echoes the last action as the env received it."""

    def __init__(self, action="box"):
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-5.0, 5.0, (2,), np.float64),
                "mode": spaces.Discrete(3),
                "bits": spaces.MultiBinary(2),
            }
        )
        self.action_space = {
            "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "multi_discrete": spaces.MultiDiscrete([3, 4]),
            "multi_binary": spaces.MultiBinary(2),
        }[action]
        self.last = np.zeros(2)

    def _obs(self):
        return {"pos": self.last.astype(np.float64), "mode": 2, "bits": np.array([1, 0], np.int8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.last = np.zeros(2)
        return self._obs(), {}

    def step(self, action):
        self.last = np.asarray(action, np.float64).reshape(2)
        return self._obs(), 0.0, False, False, {}


class Image(gym.Env):
    """uint8 HWC frames (`height` x `width` x `channels`), no wrappers: the agent must pick the
    brighter half. Optimum return `length`."""

    def __init__(self, height=42, width=42, channels=1, length=8):
        self.shape = (int(height), int(width), int(channels))
        self.length = int(length)
        self.observation_space = spaces.Box(0, 255, self.shape, np.uint8)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.side = 0

    def _obs(self):
        frame = np.full(self.shape, 20, np.uint8)
        half = self.shape[1] // 2
        if self.side == 0:
            frame[:, :half] = 255
        else:
            frame[:, half:] = 255
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.side = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self.side else 0.0
        self.t += 1
        self.side = int(self.np_random.integers(2))
        return self._obs(), reward, False, self.t >= self.length, {}


class Environ(gym.Env):
    """Observes the worker's environment: each of `names` as a number (-1 where unset)."""

    def __init__(self, names=()):
        self.names = list(names)
        self.observation_space = spaces.Box(-1, np.inf, (len(self.names),), np.float32)
        self.action_space = spaces.Discrete(1)

    def _obs(self):
        return np.array([float(os.environ.get(n, -1)) for n in self.names], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def make_match_bit(env_config):
    """An RLlib-style env creator: one `env_config` dict."""
    return MatchBit(**env_config)


class CartPoleFrom(gym.Wrapper):
    """Gymnasium's CartPole-v1 whose k-th reset starts from `states[k % len(states)]` (float64
    `[x, x_dot, theta, theta_dot]`), to compare it with the native CartPole step for step."""

    def __init__(self, states):
        super().__init__(gym.make("CartPole-v1"))
        self.states = [np.array(s, dtype=np.float64) for s in states]
        self.k = 0

    def reset(self, **kwargs):
        _, info = self.env.reset(**kwargs)
        state = self.states[self.k % len(self.states)].copy()
        self.k += 1
        self.env.unwrapped.state = state
        return np.array(state, dtype=np.float32), info


class PixelCatch(gym.Env):
    """bsuite's Catch drawn into 84x84x4 uint8 frames (cells of 8x8 pixels, the frame repeated
    in every channel): a ball falls one row a step down a 10x10 grid, the paddle on the bottom
    row stays or moves left or right; +1 when it catches the ball, -1 when it misses (episodes
    of 9 steps). A pixel task that IMPALA solves in about 100k env steps, for measuring the
    learning path (docs/DESIGN.md, "Learning on pixels")."""

    def __init__(self, size=10, cell=8):
        self.size, self.cell = int(size), int(cell)
        self.observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = spaces.Discrete(3)
        self.ball = (0, 0)
        self.paddle = 0

    def _obs(self):
        frame = np.zeros((84, 84), np.uint8)
        c = self.cell
        row, col = self.ball
        frame[row * c : (row + 1) * c, col * c : (col + 1) * c] = 255
        bottom = self.size - 1
        frame[bottom * c : (bottom + 1) * c, self.paddle * c : (self.paddle + 1) * c] = 128
        return np.repeat(frame[:, :, None], 4, axis=2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(self.size)))
        self.paddle = self.size // 2
        return self._obs(), {}

    def step(self, action):
        move = (0, -1, 1)[int(action)]
        self.paddle = min(max(self.paddle + move, 0), self.size - 1)
        row, col = self.ball
        self.ball = (row + 1, col)
        done = self.ball[0] == self.size - 1
        reward = (1.0 if self.paddle == col else -1.0) if done else 0.0
        return self._obs(), reward, done, False, {}


class HalfObservedParallel:
    """impala-rs's HalfObserved written to PettingZoo's `ParallelEnv` API: `left` and `right`
    each see one random bit (Discrete(2)); both get 1 when the parity of their actions is the
    parity of the bits; the game ends (terminates) after 10 steps (10 per agent at best, 5 at
    random)."""

    metadata = {"name": "half_observed_parallel_v0"}

    def __init__(self, *, length=10):
        self.length = int(length)
        self.possible_agents = ["left", "right"]
        self.agents = []
        self.rng = np.random.default_rng()
        self.bits = {}
        self.t = 0

    def observation_space(self, agent):
        return spaces.Discrete(2)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _draw(self):
        self.bits = {a: int(self.rng.integers(2)) for a in self.possible_agents}
        return dict(self.bits)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions):
        parity = (int(actions["left"]) ^ int(actions["right"])) == (self.bits["left"] ^ self.bits["right"])
        self.t += 1
        obs = self._draw()
        done = self.t >= self.length
        rewards = {a: float(parity) for a in self.agents}
        # A game of fixed length ends (terminates); it is not cut short by a time limit.
        terminations = {a: done for a in self.agents}
        truncations = {a: False for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


class SignalingParallel:
    """impala-rs's SignalingGame written to PettingZoo's `ParallelEnv` API, with one-hot `Box`
    observations of different sizes: each step the `speaker` sees a random bit (Box(2)) and emits
    a symbol; the `listener` sees the symbol emitted the step before (Box(3): none, 0 or 1) and
    names a bit. `reward="signal"`: both get 1 when the listener names the bit behind the symbol
    (9 a game of 10 steps at best, 4.5 at random); `reward="coin"`: each agent gets a fair coin
    (0 or 1) whatever anyone does."""

    metadata = {"name": "signaling_parallel_v0"}

    def __init__(self, *, reward="signal", length=10):
        if reward not in ("signal", "coin"):
            raise ValueError(f"reward must be 'signal' or 'coin', not {reward!r}")
        self.reward, self.length = reward, int(length)
        self.possible_agents = ["speaker", "listener"]
        self.agents = []
        self.rng = np.random.default_rng()
        self.spaces = {
            "speaker": spaces.Box(0.0, 1.0, (2,), np.float32),
            "listener": spaces.Box(0.0, 1.0, (3,), np.float32),
        }
        self.bit, self.signalled, self.t = 0, None, 0

    def observation_space(self, agent):
        return self.spaces[agent]

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _observe(self, symbol):
        self.bit = int(self.rng.integers(2))
        speaker = np.zeros(2, np.float32)
        speaker[self.bit] = 1.0
        listener = np.zeros(3, np.float32)
        listener[0 if symbol is None else 1 + int(symbol)] = 1.0
        return {"speaker": speaker, "listener": listener}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t, self.signalled = list(self.possible_agents), 0, None
        return self._observe(None), {a: {} for a in self.agents}

    def step(self, actions):
        if self.reward == "coin":
            rewards = {a: float(self.rng.integers(2)) for a in self.agents}
        else:
            right = float(self.signalled is not None and int(actions["listener"]) == self.signalled)
            rewards = {a: right for a in self.agents}
        self.signalled = self.bit
        self.t += 1
        obs = self._observe(actions["speaker"])
        done = self.t >= self.length
        agents = self.agents
        if done:
            self.agents = []
        return obs, rewards, {a: done for a in agents}, {a: False for a in agents}, {a: {} for a in agents}


class JoinAndLeave:
    """An env written to RLlib's `MultiAgentEnv` API (`possible_agents`, `observation_spaces`,
    `"__all__"`): `early` acts from the start and leaves (terminated) after step 2; `late` joins
    at step 1 and acts until the episode is truncated at step 4. Observations are the step count
    as a Box; every acting agent gets a reward of 1 per step."""

    def __init__(self, config=None):
        self.possible_agents = ["early", "late"]
        box = spaces.Box(0.0, 10.0, (1,), np.float32)
        self.observation_spaces = {a: box for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(2) for a in self.possible_agents}
        self.t = 0

    def _obs(self, *agents):
        return {a: np.array([self.t], np.float32) for a in agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs("early"), {}

    def step(self, actions):
        self.t += 1
        rewards = {a: 1.0 for a in actions}
        terminateds = {"__all__": False}
        truncateds = {"__all__": self.t >= 4}
        if self.t == 1:
            obs = self._obs("early", "late")
        elif self.t == 2:
            obs = self._obs("early", "late")
            terminateds["early"] = True
        else:
            obs = self._obs("late")
            truncateds["late"] = self.t >= 4
        return obs, rewards, terminateds, truncateds, {}


class ForkThenExit(gym.Env):
    """Counts steps in its observation; step `after` + 1 of its life forks a child that sleeps
    (holding the pipes it inherited from the env worker open) and then ends the worker with
    `os._exit(0)`, or with `exit=False` steps on. The child's pid is written to `pid_file`
    first, so a test can check that it did not outlive the worker."""

    def __init__(self, pid_file, after=2, exit=True):
        self.pid_file, self.after, self.exit = pid_file, int(after), bool(exit)
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.after + 1:
            child = os.fork()
            if child == 0:
                time.sleep(3600)
                os._exit(0)
            partial = f"{self.pid_file}.partial"
            with open(partial, "w") as f:
                f.write(str(child))
            os.rename(partial, self.pid_file)
            if self.exit:
                os._exit(0)
        return np.array([float(self.t)], np.float32), 0.0, False, False, {}


class OutOfBounds(gym.Env):
    """Box(-1, 1, (3,)) observations whose element 1 is `value` (outside the bounds when it is)
    from step `after` of each episode on; episodes last 10 steps."""

    def __init__(self, value=5.0, after=3):
        self.value, self.after = float(value), int(after)
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        obs = np.zeros(3, np.float32)
        if self.t >= self.after:
            obs[1] = self.value
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 10, {}
