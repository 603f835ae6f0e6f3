"""The env's own bound on sampling: env steps per second of a Gymnasium env alone, with random
actions and resets, in N processes at once (one per core), without impala_rs. Compare an
``impala train`` run's env steps/s with it, measured on the same machine.

    python python/benches/raw_env_rate.py [--env LunarLander-v3] [--processes 2] [--seconds 8]
"""

import argparse
import json
import multiprocessing
import time

import gymnasium as gym


def steps_per_second(env_id, seconds, seed, results):
    env = gym.make(env_id).unwrapped
    env.reset(seed=seed)
    env.action_space.seed(seed)
    steps, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        steps += 1000
    results.put(steps / seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="LunarLander-v3")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    results = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=steps_per_second, args=(args.env, args.seconds, i, results))
        for i in range(args.processes)
    ]
    for worker in workers:
        worker.start()
    rates = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    print(json.dumps({
        "env": args.env,
        "processes": args.processes,
        "env_steps_per_s": round(sum(rates)),
        "per_process": [round(r) for r in rates],
    }))


if __name__ == "__main__":
    main()
