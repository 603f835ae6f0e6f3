"""Bare PyTorch's training step of RLlib's 84x84 Atari conv net on 500 byte observations, in
float32 and under bfloat16 autocast, for comparison with `atari_cnn_train_batch_500` in
`benches/learner.rs` (run both on the same machine, side by side):

    .venv/bin/python impala-learner/benches/atari_cnn_pytorch.py [--threads 1] [--steps 10]

The net and step are the bench's bare tch step: filters [16, 8, 4], [32, 4, 2], [256, 11, 1]
with ReLU (84 -> 21 -> 11 -> 1), linear logits (6) and value heads; bytes scaled to [0, 1] and
viewed channels-last as the learner does; -sum(logp * adv) + 0.5 * 0.5 * sum((V - target)^2) -
0.01 * entropy, backward, global-norm clipping at 40, Adam at 5e-4. bf16 runs the forward pass
under `torch.autocast("cpu", torch.bfloat16)` and the loss in float32. Prints one JSON line per
precision: the median seconds per step and samples per second.
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

N, ACTIONS = 500, 6


class AtariCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(
            [nn.Conv2d(4, 16, 8, 4, padding=2), nn.Conv2d(16, 32, 4, 2, padding=2), nn.Conv2d(32, 256, 11, 1)]
        )
        self.logits = nn.Linear(256, ACTIONS)
        self.value = nn.Linear(256, 1)

    def forward(self, obs):
        x = (obs.float() / 255.0).permute(0, 3, 1, 2)
        for conv in self.convs:
            x = F.relu(conv(x))
        x = x.flatten(1)
        return self.logits(x), self.value(x).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    obs = torch.randint(0, 256, (N, 84, 84, 4), dtype=torch.uint8)
    actions = torch.randint(0, ACTIONS, (N, 1))
    adv, targets = torch.randn(N), torch.randn(N)
    for precision in ("fp32", "bf16"):
        net = AtariCnn()
        opt = torch.optim.Adam(net.parameters(), lr=5e-4)

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

        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(json.dumps({"precision": precision, "threads": args.threads,
                          "median_step_s": round(median, 5), "samples_per_s": round(N / median, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
