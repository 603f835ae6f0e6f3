"""Bare PyTorch's training step of RLlib's Atari conv nets on byte observations, for comparison
with `benches/learner.rs` (run both on the same machine, side by side):

    .venv/bin/python impala-learner/benches/atari_cnn_pytorch.py [--threads 1] [--steps 10]
    .venv/bin/python impala-learner/benches/atari_cnn_pytorch.py --net pong-fast --steps 50

`--net atari` (`atari_cnn_train_batch_500`), 500 84x84x4 observations: filters [16, 8, 4],
[32, 4, 2], [256, 11, 1] with ReLU (84 -> 21 -> 11 -> 1), linear logits (6) and value heads, in
float32 and under `torch.autocast("cpu", torch.bfloat16)` (the loss in float32).

`--net pong-fast` (`pong_fast_train_batch_160`), `examples/pong-impala-fast.toml`'s net on its
train batch of 160 42x42x4 observations: filters [16, 4, 2], [32, 4, 2], [256, 11, 1] with
RLlib's `same` padding (42 -> 21 -> 11 -> 1), a 256-unit ReLU layer, the same heads; float32,
with Adam's default (`foreach`) implementation and with `fused=True`.

`--inference` times the forward pass alone instead (`pong_fast_policy_inference_*`): no
gradients, on 8 and 16 observations (a runner's group of games, and both groups), in float32,
under bfloat16 autocast, and with the weights cast to bfloat16 once beforehand.

Training: bytes scaled to [0, 1] and viewed channels-last as the learner does; -sum(logp * adv) +
0.5 * 0.5 * sum((V - target)^2) - 0.01 * entropy, backward, global-norm clipping at 40, Adam at
5e-4. Denormals are flushed to zero, as impala-rs's threads do. Prints one JSON line per
variant: the median seconds per step (or forward pass) and samples per second.
"""

import argparse
import json
import statistics
import time
import warnings

# torch warns once when NumPy is absent (the venv may have none); nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

ACTIONS = 6


class AtariCnn(nn.Module):
    def __init__(self, net):
        super().__init__()
        if net == "atari":
            # Even padding is the convolution's own.
            self.pads = [None, None, None]
            self.convs = nn.ModuleList(
                [nn.Conv2d(4, 16, 8, 4, padding=2), nn.Conv2d(16, 32, 4, 2, padding=2), nn.Conv2d(32, 256, 11, 1)]
            )
            self.post = None
        else:
            # RLlib's same_padding(42, 4, 2) and (21, 4, 2): (1, 1) and (1, 2).
            self.pads = [(1, 1, 1, 1), (1, 2, 1, 2), None]
            self.convs = nn.ModuleList([nn.Conv2d(4, 16, 4, 2), nn.Conv2d(16, 32, 4, 2), nn.Conv2d(32, 256, 11, 1)])
            self.post = nn.Linear(256, 256)
        self.logits = nn.Linear(256, ACTIONS)
        self.value = nn.Linear(256, 1)

    def forward(self, obs):
        return self.forward_scaled(obs.float())

    def forward_scaled(self, obs):
        """The forward pass on observations already in the weights' type."""
        x = (obs / 255.0).permute(0, 3, 1, 2)
        for pad, conv in zip(self.pads, self.convs):
            if pad is not None:
                x = F.pad(x, pad)
            x = F.relu(conv(x))
        x = x.flatten(1)
        if self.post is not None:
            x = F.relu(self.post(x))
        return self.logits(x), self.value(x).squeeze(1)


def training_step(net, n, size, adam="foreach", precision="fp32"):
    """The bench's step of `net` on `n` random `size x size x 4` byte observations, as a
    function of no arguments."""
    obs = torch.randint(0, 256, (n, size, size, 4), dtype=torch.uint8)
    actions = torch.randint(0, ACTIONS, (n, 1))
    adv, targets = torch.randn(n), torch.randn(n)
    opt = torch.optim.Adam(net.parameters(), lr=5e-4, fused=adam == "fused")

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, values = net(obs)
        logp = F.log_softmax(logits.float(), -1)
        pi = -(logp.gather(1, actions).squeeze(1) * adv).sum()
        entropy = -(logp.exp() * logp).sum()
        vf = 0.5 * (values.float() - targets).square().sum()
        loss = pi - 0.01 * entropy + 0.5 * vf
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 40.0)
        opt.step()

    return step


def inference(net, n, size, precision):
    """The forward pass of `net` on `n` random observations in `precision` (`fp32`, `bf16`
    under autocast, or `bf16-weights`: a bfloat16 copy of the net), as a function of no
    arguments."""
    obs = torch.randint(0, 256, (n, size, size, 4), dtype=torch.uint8)
    if precision == "bf16-weights":
        net = net.to(torch.bfloat16)

        def forward_bf16():
            with torch.no_grad():
                logits, values = net.forward_scaled(obs.to(torch.bfloat16))
                return logits.float(), values.float()

        return forward_bf16

    def forward():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, values = net(obs)
            return logits.float(), values.float()

    return forward


def time_median(fn, warmup, steps):
    """The median seconds of `steps` calls of `fn` after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--net", choices=["atari", "pong-fast"], default="atari")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--inference", action="store_true", help="time the forward pass alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    size = 84 if args.net == "atari" else 42
    if args.inference:
        for n in (8, 16):
            for precision in ("fp32", "bf16", "bf16-weights"):
                torch.manual_seed(0)
                median = time_median(inference(AtariCnn(args.net), n, size, precision), args.warmup, args.steps)
                print(json.dumps({"net": args.net, "inference": n, "precision": precision, "threads": args.threads,
                                  "median_s": round(median, 6)}), flush=True)
        return
    n = 500 if args.net == "atari" else 160
    if args.net == "atari":
        variants = [("fp32", "foreach"), ("bf16", "foreach")]
    else:
        variants = [("fp32", "foreach"), ("fp32", "fused")]
    for precision, adam in variants:
        torch.manual_seed(0)
        step = training_step(AtariCnn(args.net), n, size, adam, precision)
        median = time_median(step, args.warmup, args.steps)
        print(json.dumps({"net": args.net, "precision": precision, "adam": adam, "threads": args.threads,
                          "median_step_s": round(median, 5), "samples_per_s": round(n / median, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
