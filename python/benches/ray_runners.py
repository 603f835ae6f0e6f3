"""Training throughput with env runners as Ray actors against runner threads: CartPole-v1 with
examples/cartpole-impala.toml's settings and two env runners either way, alternating rounds in
one process on one local Ray instance. Each round builds the algorithm, trains for
``--seconds`` of iterations and reports env steps trained per second of training (the build,
which starts the actors, is timed apart). Prints one JSON line.

    python python/benches/ray_runners.py [--rounds 3] [--seconds 15]
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import tuned_cartpole  # noqa: E402


def config(backend):
    model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
    return (
        tuned_cartpole()
        .env_runners(num_env_runners=2, env_runner_backend=backend, num_cpus_per_env_runner=0)
        .training(model=model)
    )


def round_of(backend, seconds):
    start = time.perf_counter()
    with config(backend).build() as algo:
        built = time.perf_counter() - start
        trained = 0
        training = 0.0
        while training < seconds:
            result = algo.train()
            training += result["time_this_iter_s"]
            trained = result["num_env_steps_trained"]
    return {"build_s": built, "env_steps_per_s": trained / training}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False)
    rounds = {"threads": [], "ray": []}
    for _ in range(args.rounds):
        for backend in rounds:
            rounds[backend].append(round_of(backend, args.seconds))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "")
    medians = {b: statistics.median(r["env_steps_per_s"] for r in rs) for b, rs in rounds.items()}
    print(
        json.dumps(
            {
                "cpu": model or platform.processor(),
                "rounds": rounds,
                "median_env_steps_per_s": medians,
                "ray_over_threads": medians["ray"] / medians["threads"],
            }
        )
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
