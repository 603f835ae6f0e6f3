"""Latency of a trained policy's actions: ``Policy.compute_single_action`` (and
``compute_actions`` on 1,000 observations) against the same network called from PyTorch
directly (the policy's own TorchScript export), for the CartPole MLP and RLlib's 84x84 CNN.
One thread each (impala-rs's policies run libtorch on one thread). Prints one JSON line.

    python python/benches/policy_latency.py [--calls 2000]
"""

import argparse
import json
import platform
import subprocess
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch

from impala_rs import IMPALAConfig, register_env


class Frames(gym.Env):
    """Atari-shaped observations (84x84x4 bytes), six actions: the CNN's input."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def median_s(fn, calls):
    for _ in range(max(calls // 10, 5)):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure(name, config, obs, calls, export_dir):
    with config.build() as algo:
        policy = algo.get_policy()
    module = torch.jit.load(policy.export_model(export_dir))
    rng = np.random.default_rng(0)
    batch = np.stack([obs(rng) for _ in range(1000)])
    single = batch[0]

    def torch_single():
        with torch.no_grad():
            return module(torch.from_numpy(single)[None])

    def torch_batch():
        with torch.no_grad():
            return module(torch.from_numpy(batch))

    ours_single = median_s(lambda: policy.compute_single_action(single, explore=False), calls)
    theirs_single = median_s(torch_single, calls)
    batch_calls = max(calls // 100, 5)
    ours_batch = median_s(lambda: policy.compute_actions(batch, explore=False), batch_calls)
    theirs_batch = median_s(torch_batch, batch_calls)
    return {
        "model": name,
        "single_us": {"impala_rs": ours_single * 1e6, "pytorch": theirs_single * 1e6},
        "single_goal_us": 1.5 * theirs_single * 1e6 + 20,
        "batch_1000_obs_per_s": {"impala_rs": 1000 / ours_batch, "pytorch": 1000 / theirs_batch},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    register_env("frames", lambda env_config: Frames())
    base = IMPALAConfig().env_runners(num_env_runners=1, num_envs_per_env_runner=1).debugging(seed=0)
    cartpole = base.copy().environment("CartPole-v1")
    cnn = base.copy().environment("frames")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), platform.processor())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(measure("cartpole_mlp_256x256", cartpole, lambda r: r.normal(size=4).astype(np.float32), args.calls, f"{tmp}/mlp"))
        results.append(
            measure("atari_cnn_84x84x4", cnn, lambda r: r.integers(0, 256, (84, 84, 4)).astype(np.float32), args.calls // 4, f"{tmp}/cnn")
        )
    print(json.dumps({"cpu": model, "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
