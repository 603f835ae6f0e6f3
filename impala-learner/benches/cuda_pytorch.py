"""Bare PyTorch's IMPALA learner step on a CUDA GPU, for comparison with `benches/cuda.rs` (run
both on the same machine, side by side):

    python impala-learner/benches/cuda_pytorch.py [--seconds 2]

The same networks as the Rust bench (RLlib's default [256, 256] tanh MLP with a shared value
layer on CartPole's 4 floats; the embedded CartPole config's two-torso 64x64 MLP, scripted;
RLlib's 84x84x4 conv net and the IMPALA paper's ResNet on bytes, from `atari_cnn_pytorch.py` and
`resnet_pytorch.py`), the same batches (T = 50 steps of B rows) and the same step as
`Learner::update`, written as PyTorch code usually writes it (TorchBeast's learner): the batch to
the GPU, the forward pass and a no-grad forward over the bootstrap observations (bf16 under
`torch.autocast("cuda")`), V-trace on the GPU, the loss summed over the batch, backward,
global-norm clipping at 40, Adam at 5e-4, and the three loss terms read back (one sync).
Measures per model, batch and precision:

- `update`: from host tensors in pageable memory (as the Rust learner copies);
- `update_pinned`: from pinned host tensors copied with `non_blocking=True`;
- `update_loaded`: on tensors already on the GPU.

Prints one JSON line each: the median milliseconds per step and samples per second.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parent))
from atari_cnn_pytorch import AtariCnn  # noqa: E402
from cartpole_mlp import CartPoleMlp  # noqa: E402
from resnet_pytorch import ImpalaResNet  # noqa: E402

T, GAMMA = 50, 0.99


class DefaultMlp(nn.Module):
    """RLlib's default fully connected net: [256, 256] tanh, logits and value on the torso."""

    def __init__(self):
        super().__init__()
        self.torso = nn.Sequential(nn.Linear(4, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh())
        self.logits = nn.Linear(256, 2)
        self.value = nn.Linear(256, 1)

    def forward(self, obs):
        x = self.torso(obs)
        return self.logits(x), self.value(x).squeeze(1)


def vtrace(log_rhos, discounts, rewards, values, bootstrap):
    """V-trace targets and policy-gradient advantages ([T, B] each), clip thresholds 1.0."""
    rhos = log_rhos.exp()
    clipped = rhos.clamp(max=1.0)
    cs = rhos.clamp(max=1.0)
    next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)], 0)
    deltas = clipped * (rewards + discounts * next_values - values)
    acc, vs_minus_v = torch.zeros_like(bootstrap), []
    for t in reversed(range(values.shape[0])):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v.append(acc)
    vs = torch.stack(vs_minus_v[::-1]) + values
    next_vs = torch.cat([vs[1:], bootstrap.unsqueeze(0)], 0)
    return vs, clipped * (rewards + discounts * next_vs - values)


def host_batch(model: str, rows: int, actions: int, pin: bool):
    g = torch.Generator().manual_seed(3)
    n = T * rows
    if model in ("atari_cnn", "impala_resnet"):
        obs = torch.randint(0, 256, (n, 84, 84, 4), dtype=torch.uint8, generator=g)
        boot = torch.randint(0, 256, (rows, 84, 84, 4), dtype=torch.uint8, generator=g)
    else:
        obs, boot = torch.rand(n, 4, generator=g) - 0.5, torch.rand(rows, 4, generator=g) - 0.5
    batch = {
        "obs": obs,
        "boot": boot,
        "actions": torch.randint(0, actions, (n,), generator=g),
        "behaviour_logp": torch.full((n,), -float(torch.tensor(actions).log())),
        "rewards": torch.ones(n),
        "discounts": torch.full((n,), GAMMA) * (torch.rand(n, generator=g) >= 0.02),
    }
    return {k: v.pin_memory() for k, v in batch.items()} if pin else batch


def make_net(model: str) -> nn.Module:
    if model == "cartpole_mlp":
        return DefaultMlp()
    if model == "torchscript_cartpole_64x64":
        return torch.jit.script(CartPoleMlp())
    if model == "atari_cnn":
        return AtariCnn()
    return ImpalaResNet(nchw=False)


def bench(model: str, batch_size: int, precision: str, seconds: float):
    dev = torch.device("cuda")
    rows = batch_size // T
    net = make_net(model).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=5e-4)
    actions = 6 if model in ("atari_cnn", "impala_resnet") else 2
    bf16 = precision == "bf16-mixed"

    def step(b, non_blocking):
        d = {k: v.to(dev, non_blocking=non_blocking) for k, v in b.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits, values = net(d["obs"])
            with torch.no_grad():
                _, bootstrap = net(d["boot"])
        logp = F.log_softmax(logits.float(), -1)
        target_logp = logp.gather(1, d["actions"].unsqueeze(1)).squeeze(1)
        values = values.float()
        shape = (T, rows)
        with torch.no_grad():
            vs, adv = vtrace(
                (target_logp - d["behaviour_logp"]).view(shape),
                d["discounts"].view(shape),
                d["rewards"].view(shape),
                values.view(shape),
                bootstrap.float(),
            )
        pi = -(target_logp * adv.flatten()).sum()
        vf = 0.5 * (values - vs.flatten()).square().sum()
        entropy = -(logp.exp() * logp).sum()
        loss = pi - 0.01 * entropy + 0.5 * vf
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 40.0)
        opt.step()
        return torch.stack([pi.detach(), vf.detach(), entropy.detach()]).cpu()

    pageable = host_batch(model, rows, actions, pin=False)
    pinned = host_batch(model, rows, actions, pin=True)
    on_gpu = {k: v.to(dev) for k, v in pageable.items()}
    for measure, b, non_blocking in [
        ("update", pageable, False),
        ("update_pinned", pinned, True),
        ("update_loaded", on_gpu, False),
    ]:
        for _ in range(3):
            step(b, non_blocking)
        times, start = [], time.perf_counter()
        while len(times) < 5 or time.perf_counter() - start < seconds:
            t = time.perf_counter()
            step(b, non_blocking)
            times.append(time.perf_counter() - t)
        median = statistics.median(times)
        print(json.dumps({"bare_pytorch": True, "model": model, "batch": batch_size,
                          "precision": precision, "measure": measure,
                          "ms": round(median * 1e3, 3),
                          "samples_per_s": round(batch_size / median)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"note": "PyTorch sees no CUDA device; nothing to measure"}))
        return
    torch.backends.cudnn.benchmark = False
    for model, sizes, precisions in [
        ("cartpole_mlp", (500, 4000), ("fp32",)),
        ("atari_cnn", (500, 2000), ("fp32", "bf16-mixed")),
        ("impala_resnet", (500, 2000), ("fp32", "bf16-mixed")),
        ("torchscript_cartpole_64x64", (500, 4000), ("fp32",)),
    ]:
        for size in sizes:
            for precision in precisions:
                bench(model, size, precision, args.seconds)


if __name__ == "__main__":
    main()
