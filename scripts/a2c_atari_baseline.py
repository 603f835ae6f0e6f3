"""A bare-PyTorch A2C on the Atari frames impala-rs trains on: when does a game's return leave
the random policy's, with no impala-rs code involved?

    .venv/bin/python scripts/a2c_atari_baseline.py --game pong --steps 1000000

    .venv/bin/python scripts/a2c_atari_baseline.py --game pong --steps 1500000 --crop

The envs are one ale-py `AtariVectorEnv` with impala-gym's preprocessing (42x42 grayscale of the
whole screen, 4 stacked frames, frameskip 4, noop reset, `repeat_action_probability` 0), or with
`--crop` Pong's playing field (rows 34-193 of the 210x160 screen) as 40x40 means of 4x4 blocks,
which is how the crop was first measured; `examples/pong-impala-fast.toml` crops the same rows
to 42x42. The network is that config's (convolutions [16, 4, 2], [32, 4, 2], [256, 10, 1] with
ReLU, a 256 ReLU layer, policy and value heads). A2C as OpenAI's baselines runs it on Atari: `--envs` games stepped `--unroll` steps, n-step returns,
RMSprop (lr 7e-4, alpha 0.99, eps 1e-5), entropy 0.01, value 0.5, mean losses, gradient norm
clipped at 0.5, rewards clipped to their sign. Prints one JSON line every 50,000 env steps: the
mean return of the last 100 episodes, the policy's entropy and env steps/s. One libtorch thread.
"""

import argparse
import json
import time

import ale_py
import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, actions):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 16, 4, 2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 4, 2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 256, 10, 1), nn.ReLU(), nn.Flatten(),
            nn.Linear(256, 256), nn.ReLU(),
        )
        self.pi = nn.Linear(256, actions)
        self.v = nn.Linear(256, 1)
        nn.init.normal_(self.pi.weight, std=0.01)
        nn.init.zeros_(self.pi.bias)

    def forward(self, frames):
        x = self.conv(frames.float() / 255.0)
        return self.pi(x), self.v(x).squeeze(-1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="pong")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--unroll", type=int, default=5)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--lr", type=float, default=7e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--crop", action="store_true", help="Pong's playing field, 40x40")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    env = ale_py.AtariVectorEnv(
        a.game, num_envs=a.envs, repeat_action_probability=0.0,
        img_height=210 if a.crop else 42, img_width=160 if a.crop else 42,
        autoreset_mode="SameStep", reward_clipping=False,
    )
    net = Net(int(env.single_action_space.n))
    opt = torch.optim.RMSprop(net.parameters(), lr=a.lr, alpha=0.99, eps=1e-5)
    obs, _ = env.reset(seed=np.arange(a.envs) + a.seed * a.envs)

    def view(frames):
        if a.crop:  # rows 34-193, 4x4 block means: [envs, 4, 40, 40]
            frames = frames[:, :, 34:194, :].reshape(a.envs, 4, 40, 4, 40, 4).mean(axis=(3, 5))
        return torch.from_numpy(np.ascontiguousarray(frames))

    obs = view(obs)
    returns, finished = np.zeros(a.envs), []
    steps, reported, start = 0, 0, time.time()
    while steps < a.steps:
        logps, values, rewards, dones, entropies = [], [], [], [], []
        for _ in range(a.unroll):
            logits, value = net(obs)
            dist = torch.distributions.Categorical(logits=logits)
            action = dist.sample()
            obs, reward, terminated, truncated, _ = env.step(action.numpy())
            obs = view(obs)
            done = terminated | truncated
            returns += reward
            finished.extend(returns[done])
            returns[done] = 0.0
            logps.append(dist.log_prob(action))
            values.append(value)
            entropies.append(dist.entropy())
            rewards.append(torch.from_numpy(np.sign(reward)).float())
            dones.append(torch.from_numpy(done).float())
            steps += a.envs
        with torch.no_grad():
            ret = net(obs)[1]
        targets = []
        for r, d in zip(reversed(rewards), reversed(dones)):
            ret = r + 0.99 * ret * (1.0 - d)
            targets.append(ret)
        advantage = torch.stack(targets[::-1]) - torch.stack(values)
        entropy = torch.stack(entropies).mean()
        loss = (
            -(torch.stack(logps) * advantage.detach()).mean()
            + 0.5 * advantage.pow(2).mean()
            - 0.01 * entropy
        )
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        opt.step()
        if steps - reported >= 50_000:
            reported = steps
            mean = float(np.mean(finished[-100:])) if finished else None
            print(json.dumps({
                "env_steps": steps,
                "episode_return_mean": mean,
                "entropy": round(entropy.item(), 3),
                "env_steps_per_s": round(steps / (time.time() - start)),
            }), flush=True)


if __name__ == "__main__":
    main()
