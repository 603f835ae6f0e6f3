"""Bare PyTorch's training step of the IMPALA paper's ResNet on 84x84x4 byte observations, for
comparison with `impala_resnet_train_batch_500` in `benches/learner.rs` (run both on the same
machine, side by side):

    .venv/bin/python impala-learner/benches/resnet_pytorch.py [--threads 1] [--steps 10] [--nchw]

The network is `ImpalaResNet` with its defaults (channels [16, 32, 32], hidden 256, 6 actions):
sections of conv 3x3, max-pool 3x3 stride 2 and two residual blocks, then ReLU, a fully
connected layer and ReLU, a logits head and a value head. The step is what `Learner::update`
does on the device: bytes scaled to [0, 1] and permuted to [N, C, H, W] (a channels-last view,
as ImpalaResNet keeps it; `--nchw` makes it contiguous first, as most PyTorch code does), the
forward pass over T x B = 500
observations and a no-grad forward over the B = 10 bootstrap observations, the loss terms
(-sum(logp * adv), 0.5 * sum((V - target)^2), the entropy bonus), backward, global-norm
clipping at 40 and Adam at 5e-4. V-trace, which the learner runs on the CPU between the
forward pass and the loss (well under a millisecond at this size), is left out: the advantages
and targets are fixed random tensors. Prints one JSON line: the median seconds per step and
samples (T x B) per second.
"""

import argparse
import json
import statistics
import time
import warnings

# torch warns once when NumPy is absent (the venv has none); nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

T, B, H, W, C, ACTIONS = 50, 10, 84, 84, 4, 6
CHANNELS, HIDDEN = (16, 32, 32), 256


def conv3(in_c: int, out_c: int) -> nn.Conv2d:
    return nn.Conv2d(in_c, out_c, 3, stride=1, padding=1)


class Section(nn.Module):
    def __init__(self, in_c: int, out_c: int):
        super().__init__()
        self.conv = conv3(in_c, out_c)
        self.blocks = nn.ModuleList(
            nn.ModuleList([conv3(out_c, out_c), conv3(out_c, out_c)]) for _ in range(2))

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.conv(x), 3, stride=2, padding=1)
        for a, b in self.blocks:
            x = x + b(F.relu(a(F.relu(x))))
        return x


class ImpalaResNet(nn.Module):
    def __init__(self, nchw: bool):
        super().__init__()
        self.nchw = nchw
        sections, c, h, w = [], C, H, W
        for out in CHANNELS:
            sections.append(Section(c, out))
            c, h, w = out, (h - 1) // 2 + 1, (w - 1) // 2 + 1
        self.sections = nn.ModuleList(sections)
        self.fc = nn.Linear(h * w * c, HIDDEN)
        self.logits = nn.Linear(HIDDEN, ACTIONS)
        self.value = nn.Linear(HIDDEN, 1)

    def forward(self, obs: Tensor):
        # [N, H, W, C] bytes -> [N, C, H, W] floats in [0, 1], channels-last unless --nchw.
        x = (obs.float() / 255.0).permute(0, 3, 1, 2)
        if self.nchw:
            x = x.contiguous()
        for section in self.sections:
            x = section(x)
        x = F.relu(self.fc(F.relu(x).flatten(1)))
        return self.logits(x), self.value(x).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--nchw", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = ImpalaResNet(args.nchw)
    opt = torch.optim.Adam(net.parameters(), lr=5e-4)
    n = T * B
    obs = torch.randint(0, 256, (n, H, W, C), dtype=torch.uint8)
    bootstrap_obs = torch.randint(0, 256, (B, H, W, C), dtype=torch.uint8)
    actions = torch.randint(0, ACTIONS, (n,))
    adv, targets = torch.randn(n), torch.randn(n)

    def step() -> float:
        logits, values = net(obs)
        with torch.no_grad():
            net(bootstrap_obs)
        logp_all = F.log_softmax(logits, -1)
        logp = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum()
        loss = -(logp * adv).sum() + 0.5 * 0.5 * (values - targets).square().sum() - 0.01 * entropy
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 40.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(json.dumps({
        "bench": "bare_pytorch_impala_resnet_train_batch_500",
        "torch": torch.__version__,
        "threads": args.threads,
        "layout": "nchw" if args.nchw else "channels_last",
        "steps": args.steps,
        "median_s_per_step": median,
        "min_s_per_step": min(times),
        "max_s_per_step": max(times),
        "samples_per_s": n / median,
    }))


if __name__ == "__main__":
    main()
