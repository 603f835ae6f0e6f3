#!/usr/bin/env python3
"""Record Gymnasium trajectories that impala-envs must reproduce step for step.

For each environment this writes `impala-envs/tests/fixtures/<id>.json` holding several episodes:
the env_config (extra `gymnasium.make` kwargs), the start state (`env.unwrapped.state` right after
`reset`), the first observation, the action sequence, then per step the observation, reward,
terminated and truncated flags, and the internal state after the last step. Actions come from a
seeded RNG or a simple seeded-start heuristic controller (so some episodes terminate and some hit
the time limit); either way they are recorded, so the Rust tests replay them without Python.

Usage (Gymnasium from PyPI, in a throwaway virtual environment):

    python3 -m venv /tmp/gymvenv && /tmp/gymvenv/bin/pip install gymnasium numpy
    /tmp/gymvenv/bin/python scripts/record_env_fixtures.py

Observations and float32 actions are written with the shortest decimal that round-trips as
float32; rewards and states with the shortest decimal that round-trips as float64.
"""

import json
import pathlib

import gymnasium as gym
import numpy as np

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "impala-envs" / "tests" / "fixtures"


def f32(x):
    """The shortest decimal that reads back as this float32 value, as a JSON number."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


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


def record_episode(env_id, seed, policy, env_config=None, max_steps=None):
    """One episode from `reset(seed=seed)` until terminated or truncated (or `max_steps`)."""
    env_config = env_config or {}
    env = gym.make(env_id, **env_config)
    obs, _ = env.reset(seed=seed)
    start_state = [float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)]
    action_rng = np.random.default_rng(seed + 1000)
    episode = {
        "env_config": env_config,
        "seed": seed,
        "policy": policy if isinstance(policy, str) else policy.__name__,
        "start_state": start_state,
        "reset_obs": [f32(v) for v in obs],
        "actions": [],
        "obs": [],
        "rewards": [],
        "terminated": [],
        "truncated": [],
    }
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    while max_steps is None or len(episode["rewards"]) < max_steps:
        if policy == "random" and discrete:
            action = int(action_rng.integers(env.action_space.n))
            recorded = action
        elif policy == "random":
            # Wider than the action space, so the env's own clipping is exercised.
            low, high = env.action_space.low * 1.25, env.action_space.high * 1.25
            action = action_rng.uniform(low, high).astype(np.float32)
            recorded = [f32(v) for v in action]
        else:
            action = policy(np.asarray(env.unwrapped.state))
            recorded = action
        obs, reward, terminated, truncated, _ = env.step(action)
        episode["actions"].append(recorded)
        episode["obs"].append([f32(v) for v in obs])
        episode["rewards"].append(float(reward))
        episode["terminated"].append(int(terminated))
        episode["truncated"].append(int(truncated))
        if terminated or truncated:
            break
    episode["final_state"] = [
        float(v) for v in np.asarray(env.unwrapped.state, dtype=np.float64)
    ]
    env.close()
    return episode


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


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for env_id, specs in EPISODES.items():
        episodes = [record_episode(env_id, seed, policy, cfg) for seed, policy, cfg in specs]
        doc = {
            "id": env_id,
            "gymnasium_version": gym.__version__,
            "numpy_version": np.__version__,
            "episodes": episodes,
        }
        path = OUT_DIR / f"{env_id}.json"
        with path.open("w") as f:
            f.write(json.dumps(doc, separators=(",", ":")))
            f.write("\n")
        steps = sum(len(e["rewards"]) for e in episodes)
        ends = ", ".join(
            f"{len(e['rewards'])}{'T' if e['terminated'][-1] else ''}{'t' if e['truncated'][-1] else ''}"
            for e in episodes
        )
        print(f"{env_id}: {len(episodes)} episodes, {steps} steps ({ends}) -> {path}")


if __name__ == "__main__":
    main()
