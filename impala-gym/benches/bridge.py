"""Env steps/s sampled through impala-rs's Python env workers vs the bare env, side by side.

    .venv/bin/python impala-gym/benches/bridge.py --env CartPole-v1 --workers 2 --envs-per-worker 4
    .venv/bin/python impala-gym/benches/bridge.py --env ALE/Pong-v5 --workers 1 --envs-per-worker 8 \
        --config examples/pong-impala.toml
    .venv/bin/python impala-gym/benches/bridge.py --env ALE/Pong-v5 --workers 2 --envs-per-worker 8 \
        --config examples/pong-impala-fast.toml --set 'precision="bf16-mixed"'

Raw: `--workers` Python processes, each stepping `--envs-per-worker` envs (Gymnasium's
`gym.make`, or one ale-py `AtariVectorEnv` for `ALE/` ids, with the preprocessing impala-gym uses)
with random actions in a plain loop for `--seconds`.

Multi-agent envs given as entry points (`--env pettingzoo.classic.rps_v2:env`) are stepped in the
raw loop with a random action for every live agent; both sides count env steps.

impala-rs: `impala train` with `_env_runners_only` (sampling only: policy inference and
everything a runner does per step, no learner) on the same envs in the same number of worker
processes (`--runners` env runners share them), for `--seconds`; the rate is taken over the iterations after the
first (start-up excluded). The two alternate for `--rounds` rounds, since this machine's speed drifts
between minutes; prints one JSON line with each round's rates and ratio and their medians.
"""

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def raw_worker(env_id, count, seconds, env_config, queue):
    import numpy as np

    rng = np.random.default_rng(os.getpid())
    steps = 0
    if env_id.startswith("ALE/"):
        import ale_py

        game = env_id.split("/", 1)[1].split("-", 1)[0]
        game = "".join("_" + c.lower() if c.isupper() else c for c in game).lstrip("_")
        # ale-py cannot crop (`env_config.crop` is impala-gym's): the raw loop takes frames of
        # the same size, of the whole screen.
        config = {k: v for k, v in env_config.items() if k != "crop"}
        kwargs = {"autoreset_mode": "SameStep", "reward_clipping": False, **config}
        vec = ale_py.AtariVectorEnv(game, num_envs=count, **kwargs)
        vec.reset(seed=0)
        n = vec.single_action_space.n
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            vec.step(rng.integers(0, n, size=count))
            steps += count
    elif ":" in env_id and multi_agent_env(env_id, env_config):
        # A multi-agent env (PettingZoo's parallel or AEC API, or RLlib's): every live agent
        # acts at random; env steps are counted.
        envs = [multi_agent_env(env_id, env_config) for _ in range(count)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        space = agent_action_space(envs[0])
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for env in envs:
                live = getattr(env, "agents", None) or env.possible_agents
                _, _, terms, truncs, _ = env.step({a: space(a).sample() for a in live})
                steps += 1
                done = terms.get("__all__", False) or truncs.get("__all__", False)
                if done or (hasattr(env, "agents") and not env.agents):
                    env.reset()
    else:
        import gymnasium as gym

        envs = [gym.make(env_id, **env_config) for _ in range(count)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        space = envs[0].action_space
        # Random actions drawn ahead (Discrete) so that the loop times the env, not sampling.
        if isinstance(space, gym.spaces.Discrete):
            actions = [int(a) for a in rng.integers(0, space.n, size=4096)]
        else:
            actions = [space.sample() for _ in range(4096)]
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for env in envs:
                _, _, term, trunc, _ = env.step(actions[steps % 4096])
                steps += 1
                if term or trunc:
                    env.reset()
    queue.put(steps / (time.perf_counter() - start))


def multi_agent_env(env_id, env_config):
    """The env of entry point `env_id` as a parallel multi-agent env, or None if it is not one
    (AEC envs through PettingZoo's `aec_to_parallel`, as the env workers step them)."""
    import importlib
    import inspect

    module, _, name = env_id.partition(":")
    sys.path.insert(0, os.getcwd())
    creator = getattr(importlib.import_module(module), name)
    params = [p for p in inspect.signature(creator).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    env = creator(env_config) if len(params) == 1 else creator(**env_config)
    if not (hasattr(env, "possible_agents") or hasattr(env, "get_agent_ids")):
        return None
    try:
        from pettingzoo.utils.env import AECEnv
        from pettingzoo.utils.conversions import aec_to_parallel

        if isinstance(env, AECEnv):
            env = aec_to_parallel(env)
    except ImportError:
        pass
    return env


def agent_action_space(env):
    """`agent -> action space` of a multi-agent env (PettingZoo's method or RLlib's dict)."""
    if callable(getattr(env, "action_space", None)):
        return env.action_space
    return lambda agent: env.action_spaces[agent]


def raw_rate(args, env_config):
    queue = mp.Queue()
    procs = [
        mp.Process(target=raw_worker, args=(args.env, args.envs_per_worker, args.seconds, env_config, queue))
        for _ in range(args.workers)
    ]
    for p in procs:
        p.start()
    rates = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def impala_rate(args):
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        cmd = [args.impala, "train"]
        if args.config:
            cmd.append(args.config)
        cmd += [
            "--env", args.env,
            "--set", 'env_backend="gymnasium"',
            "--set", "_env_runners_only=true",
            "--set", f"num_env_runners={args.runners}",
            "--set", f"num_envs_per_env_runner={args.workers // args.runners * args.envs_per_worker}",
            "--set", f"num_envs_per_env_worker={args.envs_per_worker}",
            "--set", "min_time_s_per_iteration=2",
            *[arg for setting in args.set for arg in ("--set", setting)],
            "--stop-time", str(args.seconds),
            "--run-dir", run,
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(run, "result.json")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) < 3:
        raise SystemExit(f"only {len(rows)} iterations; raise --seconds")
    first, last = rows[0], rows[-1]
    steps = last["num_env_steps_sampled"] - first["num_env_steps_sampled"]
    return steps / (last["time_total_s"] - first["time_total_s"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--workers", type=int, default=2, help="Python processes, in all")
    p.add_argument("--runners", type=int, default=1, help="env runners sharing the workers")
    p.add_argument("--envs-per-worker", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=3, help="raw and impala-rs alternate this often")
    p.add_argument("--config", help="an impala config file (its env_config is used for raw too)")
    p.add_argument("--impala", default=os.path.join(ROOT, "target", "release", "impala"))
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="more impala-rs config, e.g. --set 'precision=\"bf16-mixed\"' (repeatable)",
    )
    args = p.parse_args()
    env_config = {}
    if args.config:
        import tomllib

        with open(args.config, "rb") as f:
            env_config = tomllib.load(f).get("env_config", {})
    raws, ours = [], []
    for _ in range(args.rounds):
        raws.append(raw_rate(args, env_config))
        ours.append(impala_rate(args))
    print(
        json.dumps(
            {
                "env": args.env,
                "workers": args.workers,
                "runners": args.runners,
                "envs_per_worker": args.envs_per_worker,
                "config": args.config,
                "set": args.set,
                "raw_env_steps_per_s": [round(r, 1) for r in raws],
                "impala_env_steps_per_s": [round(r, 1) for r in ours],
                "ratios": [round(o / r, 3) for o, r in zip(ours, raws)],
                "median_raw": round(statistics.median(raws), 1),
                "median_impala": round(statistics.median(ours), 1),
                "median_ratio": round(statistics.median(o / r for o, r in zip(ours, raws)), 3),
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
