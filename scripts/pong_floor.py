"""The least CPU time an env step of `examples/pong-impala-fast.toml` can cost on this machine,
whatever runs it, and so the least wall time to Pong's score of 18 on N cores.

Every env step of that config is paid for by four pieces of work, each timed here alone on one
core with nothing of impala-rs in it:

- `ale`: ale-py's `AtariVectorEnv` stepping 8 Pong games (frameskip 4, full-screen grayscale
  frames, as the env workers ask for them), one thread;
- `frames`: the env worker's own crop, area resize to 42x42 and frame stack
  (`impala-gym/python/impala_gym_worker.py`'s `CroppedFrames`);
- `inference`: bare PyTorch's forward pass of the config's net on 16 frames (the runner's two
  groups of 8 in one call, the cheaper of the two batch sizes);
- `learning`: bare PyTorch's training step on the config's train batch of 160 (forward,
  backward, clipping, `fused=True` Adam: `impala-learner/benches/atari_cnn_pytorch.py`'s).

    .venv/bin/python scripts/pong_floor.py [--steps-to-score 4430000] [--cores 2] [--precision bf16]

`--precision bf16` times the training step under bfloat16 autocast, as `precision = "bf16-mixed"`
runs it (on CPUs with AVX512-BF16 or AMX); inference stays float32, as the env runners' does.

Prints one JSON line: microseconds per env step of each piece, their sum, and
`steps_to_score * sum / cores`, the wall time to the score if the cores did nothing else and
were all used all the time. That is a floor: the vCPUs of a small VM can slow each other down,
so the training step is also timed while a second process runs it on the other core
(`pair_slowdown`, its time then over its time alone), and `floor_paired_s` scales the floor by
it.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "impala-gym" / "python"))
sys.path.insert(0, str(ROOT / "impala-learner" / "benches"))

import atari_cnn_pytorch  # noqa: E402
import impala_gym_worker  # noqa: E402

GAMES = 8


def per_step_us(run, steps_per_call, calls, rounds=5):
    """The median over `rounds` of microseconds per env step of `run()`."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - start) / (calls * steps_per_call) * 1e6)
    return statistics.median(times)


def env_costs():
    import ale_py

    vec = ale_py.AtariVectorEnv(
        "pong", num_envs=GAMES, img_height=210, img_width=160, stack_num=1, num_threads=1,
        repeat_action_probability=0.0, autoreset_mode="SameStep", reward_clipping=False,
    )
    obs, _ = vec.reset(seed=np.arange(GAMES))
    rng = np.random.default_rng(0)
    raws = []

    def step():
        raws.append(vec.step(rng.integers(0, 6, GAMES))[0])

    ale = per_step_us(step, GAMES, 100)
    frames = impala_gym_worker.CroppedFrames(np, GAMES, vec, {"top": 34, "bottom": 16}, (42, 42), 4)
    frames.reset(obs)
    ended = np.zeros(GAMES, bool)
    i = iter(range(10**9))

    def shrink():
        raw = raws[next(i) % len(raws)]
        frames.step(raw, raw, ended)

    return ale, per_step_us(shrink, GAMES, 100)


def net_costs(precision):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = atari_cnn_pytorch.AtariCnn("pong-fast")
    inference = per_step_us(inference_step(net), 16, 100)
    return inference, per_step_us(train_step(net, precision), 160, 10)


def inference_step(net):
    """The runner's step on 16 frames: the bench's float32 forward pass, then sampling."""
    forward = atari_cnn_pytorch.inference(net, 16, 42, "fp32")

    def infer():
        logits, _ = forward()
        torch.multinomial(F.softmax(logits, -1), 1)

    return infer


def train_step(net, precision):
    """The bench's training step on the config's batch of 160 with `fused=True` Adam."""
    return atari_cnn_pytorch.training_step(net, 160, 42, adam="fused", precision=precision)


def train_until(stop, precision):
    """Runs the training step until `stop` is set (the busy sibling of `pair_slowdown`)."""
    torch.set_num_threads(1)
    learn = train_step(atari_cnn_pytorch.AtariCnn("pong-fast"), precision)
    while not stop.is_set():
        learn()


def pair_slowdown(alone_us, precision):
    """The training step's time per sample while another process runs it, over `alone_us`."""
    import multiprocessing

    stop = multiprocessing.Event()
    sibling = multiprocessing.Process(target=train_until, args=(stop, precision))
    sibling.start()
    try:
        time.sleep(1.0)
        paired = per_step_us(train_step(atari_cnn_pytorch.AtariCnn("pong-fast"), precision), 160, 10)
    finally:
        stop.set()
        sibling.join()
    return paired / alone_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps-to-score", type=float, default=4.43e6,
                        help="env steps to a 100-episode mean of 18 (the fewest measured)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: the training step under bfloat16 autocast (precision = \"bf16-mixed\")")
    args = parser.parse_args()
    ale, frames = env_costs()
    inference, learning = net_costs(args.precision)
    total = ale + frames + inference + learning
    slowdown = pair_slowdown(learning, args.precision)
    floor = args.steps_to_score * total * 1e-6 / args.cores
    print(json.dumps({
        "us_per_env_step": {"ale": round(ale, 1), "frames": round(frames, 1),
                            "inference": round(inference, 1), "learning": round(learning, 1),
                            "total": round(total, 1)},
        "precision": args.precision, "steps_to_score": args.steps_to_score, "cores": args.cores,
        "floor_s": round(floor), "pair_slowdown": round(slowdown, 2),
        "floor_paired_s": round(floor * slowdown),
    }), flush=True)


if __name__ == "__main__":
    main()
