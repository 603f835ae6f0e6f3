"""What episode callbacks cost: env steps sampled per second of ``train()`` on CartPole-v1 (the
native env) with a no-op ``on_episode_end`` callback (the env runners record every episode, the
driver replays them after each iteration) and without one. Rounds alternate (a fresh algorithm
each, the same seed), so both see the same machine load and the same learning curve (short
episodes early, long ones once the pole stays up). Prints one JSON line with both rates (the
median over rounds) and their ratio.

    python python/benches/episode_callbacks.py [--rounds 3] [--iterations 5] [--step]
"""

import argparse
import json
import platform
import statistics
import subprocess
import time

from impala_rs import IMPALAConfig


def config(iteration_s):
    return (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8, rollout_fragment_length=50)
        .training(train_batch_size=400, model={"fcnet_hiddens": [64, 64]})
        .reporting(min_time_s_per_iteration=iteration_s)
        .debugging(seed=0)
    )


def measure(config, iterations):
    """Env steps sampled per second of `train()` calls, and episodes per second."""
    steps = episodes = 0
    elapsed = 0.0
    with config.build_algo() as algo:
        for _ in range(iterations):
            start = time.perf_counter()
            result = algo.train()
            elapsed += time.perf_counter() - start
            steps += result["num_env_steps_sampled_this_iter"]
            episodes += result["num_episodes"]
    return steps / elapsed, episodes / elapsed


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds with and without, alternating")
    parser.add_argument("--iterations", type=int, default=5, help="train() calls per round")
    parser.add_argument("--iteration-s", type=float, default=1.0, help="min_time_s_per_iteration")
    parser.add_argument("--step", action="store_true", help="also a no-op on_episode_step (every step replayed)")
    args = parser.parse_args()

    hooks = {"on_episode_end": lambda **kwargs: None}
    if args.step:
        hooks["on_episode_step"] = lambda **kwargs: None
    plain = config(args.iteration_s)
    with_callback = config(args.iteration_s).callbacks(**hooks)
    rates = {"without": [], "with": []}
    episodes = {"without": [], "with": []}
    for _ in range(args.rounds):
        for name, cfg in (("without", plain), ("with", with_callback)):
            steps_per_s, episodes_per_s = measure(cfg, args.iterations)
            rates[name].append(steps_per_s)
            episodes[name].append(episodes_per_s)
    without, with_ = statistics.median(rates["without"]), statistics.median(rates["with"])
    print(
        json.dumps(
            {
                "cpu": cpu_model(),
                "hooks": sorted(hooks),
                "rounds": args.rounds,
                "iterations": args.iterations,
                "iteration_s": args.iteration_s,
                "env_steps_per_s_without": round(without),
                "env_steps_per_s_with": round(with_),
                "ratio": round(with_ / without, 3),
                "episodes_per_s_without": round(statistics.median(episodes["without"])),
                "episodes_per_s_with": round(statistics.median(episodes["with"])),
                "rounds_without": [round(r) for r in rates["without"]],
                "rounds_with": [round(r) for r in rates["with"]],
            }
        )
    )


if __name__ == "__main__":
    main()
