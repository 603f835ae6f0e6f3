#!/usr/bin/env python3
"""Record Gymnasium trajectories that impala-envs must reproduce bit for bit.

For each environment this writes `impala-envs/tests/fixtures/<id>.json` with:

- `episodes`: a few chosen episodes (`"run": "episode"`), each from `reset(seed=...)`, with
  random actions or a simple heuristic controller (so some terminate and some reach the time
  limit), and possibly an `env_config` (extra `gymnasium.make` kwargs);
- then one free run (`"run": "free"`): a single env reset once with a seed, then stepped with
  random actions from a seeded numpy RNG for a few thousand steps, resetting itself
  (`reset()`, no seed) after every episode, as an env runner uses it.

Every episode holds the start state (`env.unwrapped.state` right after `reset`), the reset
observation, the actions, then per step the observation, reward and terminated / truncated
flags (free runs: a digest of them per step, which keeps the files small and still tells the
first step that differs), and the internal state after its last step. The Rust tests start
from the recorded state (their reset RNG is not numpy's) and replay the actions, so they need
no Python.

The Acrobot fixture also holds `float32_trig`: digests of numpy's `float32` `np.sin` and
`np.cos` over evenly spaced float32 bit patterns (Gymnasium's Acrobot takes them of its
`float32` reset state), so the Rust port of numpy's kernel is checked on millions of inputs.

Encoding (to keep the files small): per-step vectors are base64 of little-endian bytes:
`reset_obs` and `obs` float32 (`steps x obs_dim`), continuous `actions` float32, `rewards`
float64, `step_digests` uint32; discrete `actions` are a string of digits; `terminated` /
`truncated` a string of `0`/`1`, one per step. States are JSON numbers (shortest decimals that round-trip as float64).
A trig digest is `sum(bits[i] * (2 i + 1)) mod 2^64` over the results' uint32 bit patterns.

Usage (Gymnasium from PyPI, in a throwaway virtual environment):

    python3 -m venv /tmp/gymvenv && /tmp/gymvenv/bin/pip install gymnasium numpy
    /tmp/gymvenv/bin/python scripts/record_env_fixtures.py
"""

import base64
import json
import pathlib
import platform

import gymnasium as gym
import numpy as np

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "impala-envs" / "tests" / "fixtures"

# Steps of each env's free run.
FREE_RUN_STEPS = {
    "CartPole-v1": 3000,
    "Acrobot-v1": 10000,
    "MountainCar-v0": 4000,
    "Pendulum-v1": 6000,
}


def b64(values, dtype):
    """Little-endian bytes of `values` as `dtype`, in base64."""
    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode("ascii")


def state_of(env):
    return [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]


def cartpole_pd(state):
    """A PD controller that balances the pole for the whole time limit."""
    x, x_dot, theta, theta_dot = state
    return int(10 * theta + 2 * theta_dot + 0.1 * x + 0.5 * x_dot > 0)


def acrobot_pump(state):
    """Torque along the second joint's velocity: pumps energy until the tip swings up."""
    return 2 if state[3] > 0 else 0


def mountain_car_pump(state):
    """Push in the direction of motion: reaches the flag in about 120 steps."""
    return 2 if state[1] >= 0 else 0


class Recorder:
    """Collects one episode's steps."""

    def __init__(self, env, run, seed, policy, env_config, obs):
        self.discrete = isinstance(env.action_space, gym.spaces.Discrete)
        self.doc = {
            "run": run,
            "env_config": env_config,
            "seed": seed,
            "policy": policy,
            "start_state": state_of(env),
        }
        self.reset_obs = np.asarray(obs, dtype=np.float32)
        self.actions, self.obs, self.rewards, self.terminated, self.truncated = [], [], [], [], []

    def step(self, env, action):
        obs, reward, terminated, truncated, _ = env.step(action)
        self.actions.append(action)
        self.obs.append(np.asarray(obs, dtype=np.float32))
        self.rewards.append(float(reward))
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))
        return terminated or truncated

    def finish(self, env, full):
        """The episode's record: every step's values if `full`, else one digest per step."""
        doc = self.doc
        doc["steps"] = len(self.rewards)
        doc["reset_obs"] = b64(self.reset_obs, "<f4")
        if self.discrete:
            doc["actions"] = "".join(str(int(a)) for a in self.actions)
        else:
            doc["actions"] = b64(np.concatenate(self.actions), "<f4")
        if full:
            doc["obs"] = b64(np.concatenate(self.obs), "<f4")
            doc["rewards"] = b64(self.rewards, "<f8")
            doc["terminated"] = "".join("1" if t else "0" for t in self.terminated)
            doc["truncated"] = "".join("1" if t else "0" for t in self.truncated)
        else:
            steps = zip(self.obs, self.rewards, self.terminated, self.truncated)
            doc["step_digests"] = b64([step_digest(*step) for step in steps], "<u4")
        doc["final_state"] = state_of(env)
        return doc


def step_digest(obs, reward, terminated, truncated):
    """FNV-1a (32 bits) of one step's bytes: obs (float32 LE), reward (float64 LE), then one
    byte each for terminated and truncated."""
    data = np.asarray(obs, dtype="<f4").tobytes() + np.float64(reward).astype("<f8").tobytes()
    data += bytes([int(terminated), int(truncated)])
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def random_action(env, rng):
    if isinstance(env.action_space, gym.spaces.Discrete):
        return int(rng.integers(env.action_space.n))
    # Wider than the action space, so the env's own clipping is exercised.
    low, high = env.action_space.low * 1.25, env.action_space.high * 1.25
    return rng.uniform(low, high).astype(np.float32)


def record_episode(env_id, seed, policy, env_config):
    """One episode from `reset(seed=seed)` until terminated or truncated."""
    env = gym.make(env_id, **env_config)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed + 1000)
    name = policy if isinstance(policy, str) else policy.__name__
    rec = Recorder(env, "episode", seed, name, env_config, obs)
    while True:
        if policy == "random":
            action = random_action(env, rng)
        else:
            action = policy(np.asarray(env.unwrapped.state))
        if rec.step(env, action):
            break
    doc = rec.finish(env, full=True)
    env.close()
    return doc


def record_free_run(env_id, seed, steps):
    """One env, seeded once, stepped with random actions for `steps` steps over many
    episodes; the last episode may be cut short (its flags then end in 0)."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed + 1000)
    obs, _ = env.reset(seed=seed)
    episodes, episode_seed, total = [], seed, 0
    while total < steps:
        rec = Recorder(env, "free", episode_seed, "random", {}, obs)
        while total < steps:
            total += 1
            if rec.step(env, random_action(env, rng)):
                break
        episodes.append(rec.finish(env, full=False))
        obs, _ = env.reset()
        episode_seed = None
    env.close()
    return episodes


def digest(values):
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    weights = 2 * np.arange(bits.size, dtype=np.uint64) + 1
    return int((bits * weights).sum(dtype=np.uint64))


def float32_bits(x):
    return int(np.float32(x).view(np.uint32))


# (first bit pattern, end bit pattern (exclusive), stride): Acrobot's reset range [-0.1, 0.1]
# densely, then [-2e5, 2e5], past both ends of numpy's Cody-Waite range, sparsely.
TRIG_SWEEPS = [
    (0, float32_bits(0.1) + 1, 1009),
    (float32_bits(-0.0), float32_bits(-0.1) + 1, 1009),
    (0, float32_bits(2e5) + 1, 4099),
    (float32_bits(-0.0), float32_bits(-2e5) + 1, 4099),
]


def float32_trig():
    sweeps = []
    for start, end, stride in TRIG_SWEEPS:
        x = np.arange(start, end, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)
        sweeps.append(
            {
                "start_bits": start,
                "end_bits": end,
                "stride": stride,
                "count": int(x.size),
                "sin_digest": digest(np.sin(x)),
                "cos_digest": digest(np.cos(x)),
            }
        )
    return sweeps


EPISODES = {
    "CartPole-v1": [
        (1, "random", {}),
        (2, "random", {}),
        (3, "random", {}),
        (4, "random", {"sutton_barto_reward": True}),
        (5, cartpole_pd, {}),
        (6, cartpole_pd, {"max_episode_steps": 120}),
    ],
    "Acrobot-v1": [
        (11, "random", {}),
        (12, acrobot_pump, {}),
        (13, acrobot_pump, {}),
    ],
    "MountainCar-v0": [
        (21, "random", {}),
        (22, mountain_car_pump, {}),
        (23, mountain_car_pump, {"goal_velocity": 0.02}),
    ],
    "Pendulum-v1": [
        (31, "random", {}),
        (32, "random", {"g": 9.81}),
        (33, "random", {"max_episode_steps": 50}),
    ],
}

FREE_RUN_SEEDS = {"CartPole-v1": 101, "Acrobot-v1": 111, "MountainCar-v0": 121, "Pendulum-v1": 131}


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    features = np._core._multiarray_umath.__cpu_features__
    for env_id, specs in EPISODES.items():
        episodes = [record_episode(env_id, seed, policy, cfg) for seed, policy, cfg in specs]
        free = record_free_run(env_id, FREE_RUN_SEEDS[env_id], FREE_RUN_STEPS[env_id])
        doc = {
            "id": env_id,
            "gymnasium_version": gym.__version__,
            "numpy_version": np.__version__,
            "platform": f"{platform.machine()} {'-'.join(platform.libc_ver())}",
            "numpy_fma3": bool(features.get("FMA3") or features.get("ASIMD")),
            "episodes": episodes + free,
        }
        if env_id == "Acrobot-v1":
            doc["float32_trig"] = float32_trig()
        path = OUT_DIR / f"{env_id}.json"
        with path.open("w") as f:
            f.write(json.dumps(doc, separators=(",", ":")))
            f.write("\n")
        ends = ", ".join(
            f"{e['steps']}{'T' if e['terminated'][-1] == '1' else ''}"
            f"{'t' if e['truncated'][-1] == '1' else ''}"
            for e in episodes
        )
        free_steps = sum(e["steps"] for e in free)
        print(
            f"{env_id}: episodes {ends}; free run {free_steps} steps in {len(free)} episodes;"
            f" {path.stat().st_size // 1024} KiB -> {path}"
        )


if __name__ == "__main__":
    main()
