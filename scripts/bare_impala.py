"""A bare-PyTorch IMPALA loop (V-trace, RLlib's loss, Adam): how a model learns with given
settings because of the algorithm itself, with no impala-rs code involved. The reference that
impala-rs's learning is checked against (docs/LEARNING.md).

    .venv/bin/python scripts/bare_impala.py --model residual --seed 1 --seconds 150
    .venv/bin/python scripts/bare_impala.py --model mlp64 --seed 1 --lag 2
    .venv/bin/python scripts/bare_impala.py --env impala_test_envs:CoinBit --model mlp256shared \
        --lr 0.001 --entropy-coeff 0.01 --loss-reduction sum --fragment 20 --num-envs 16 --batch 640
    PYTHONPATH=impala-gym/tests/envs .venv/bin/python scripts/bare_impala.py \
        --parallel-env impala_test_envs:SignalingParallel --env-kwargs '{"reward": "signal"}' \
        --model mlp256shared --lr 0.001 --entropy-coeff 0.01 --loss-reduction sum --fragment 20 \
        --num-envs 16 --batch 640 --vf-loss-coeff 0.5 --seconds 40
    .venv/bin/python scripts/bare_impala.py --self-test

`--env` is a Gymnasium id or `module:Class` (a `gymnasium.Env` with a flat `Box` observation and
a `Discrete` action space), CartPole-v1 by default.
Sampling: `--num-envs` envs (8) in a plain list, each reset by hand when it
terminates or truncates. A fragment is 50 steps of all 8 envs (time-major [T=50, B=8]); a train
batch is 800 env steps = 2 fragments side by side ([50, 16]), each row bootstrapped from the
observation after its last step. Termination: discount 0. Truncation: gamma * V_behaviour(final
obs) folded into that step's reward, discount 0 (as impala-rs does). `--lag K` acts with the
weights of K updates ago. Loss: RLlib's (old stack) VTraceLoss, V-trace with rho_bar = pg_rho_bar
= c_bar = 1, values and bootstrap from the current network. Adam (torch defaults), global-norm
gradient clipping. Defaults are RLlib's tuned CartPole IMPALA settings (lr 5e-4, vf 0.05,
entropy 0, grad clip 40, mean loss reduction, gamma 0.99). One libtorch thread.

Prints one JSON line about every 2 s (return_mean: mean of the last 100 finished episodes) and a
final summary line. held_60s_after is null when the run ended less than 60 s after first
reaching 450 without having dropped below 400.

Multi-agent mode: `--parallel-env module:Class` (a PettingZoo `ParallelEnv`, built with
`--env-kwargs`, a JSON object also passed to a `--env` constructor) in which every agent acts at
every step and all agents end together (anything else is an error). Independent learners: one
`--model` (sized for that agent's observation and action count) and one Adam per agent, each
updated on its own agent's rows exactly as the single-agent loop (`Learner.update`), with
`--batch` agent steps per update per agent. The JSON lines give per agent return_mean (that
agent's last 100 episode returns), entropy, rho_mean and grad_norm; the summary gives per agent the
final return and entropy and the time and env steps at which its return_mean first reached
`--target-return` (8.0; null if never).
"""

import argparse
import collections
import copy
import importlib
import importlib.util
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def fixture_module(name):
    """A module class of impala-learner's TorchScript test fixtures
    (`impala-learner/tests/fixtures/scripted_models.py`), so both sides train the same module."""
    path = Path(__file__).resolve().parent.parent / "impala-learner/tests/fixtures/scripted_models.py"
    spec = importlib.util.spec_from_file_location("scripted_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


ResidualMlp = fixture_module("ResidualMlp")


def slim_fc(i, o, std):
    """RLlib's SlimFC init: normc_initializer(std) weights (each output row of norm std), zero bias."""
    layer = nn.Linear(i, o)
    with torch.no_grad():
        w = torch.randn(o, i)
        layer.weight.copy_(w * std / w.pow(2).sum(1, keepdim=True).sqrt())
        layer.bias.zero_()
    return layer


def trunk(obs, hiddens):
    layers, prev = [], obs
    for h in hiddens:
        layers += [slim_fc(prev, h, 1.0), nn.Tanh()]
        prev = h
    return nn.Sequential(*layers)


class Mlp64(nn.Module):
    """RLlib's fcnet [64, 64] tanh with vf_share_layers=False: separate policy and value MLPs."""

    def __init__(self, obs=4, actions=2):
        super().__init__()
        self.pi = nn.Sequential(trunk(obs, [64, 64]), slim_fc(64, actions, 0.01))
        self.vf = nn.Sequential(trunk(obs, [64, 64]), slim_fc(64, 1, 0.01))

    def forward(self, obs):
        return self.pi(obs), self.vf(obs).squeeze(1)


class Mlp256Shared(nn.Module):
    """A shared 4-256-256 tanh trunk with logits and value heads."""

    def __init__(self, obs=4, actions=2):
        super().__init__()
        self.trunk = trunk(obs, [256, 256])
        self.logits = slim_fc(256, actions, 0.01)
        self.value = slim_fc(256, 1, 0.01)

    def forward(self, obs):
        x = self.trunk(obs)
        return self.logits(x), self.value(x).squeeze(1)


MODELS = {"residual": ResidualMlp, "mlp64": Mlp64, "mlp256shared": Mlp256Shared}


def vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar=1.0, pg_rho_bar=1.0, c_bar=1.0):
    """V-trace targets and policy-gradient advantages ([T, B] inputs, bootstrap [B]), no gradients."""
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos.clamp(max=rho_bar)
        cs = rhos.clamp(max=c_bar)
        values_tp1 = torch.cat([values[1:], bootstrap[None]], 0)
        deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
        acc = torch.zeros_like(bootstrap)
        vs_minus_v = torch.zeros_like(values)
        for t in reversed(range(values.shape[0])):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        vs_tp1 = torch.cat([vs[1:], bootstrap[None]], 0)
        pg_adv = rhos.clamp(max=pg_rho_bar) * (rewards + discounts * vs_tp1 - values)
        return vs, pg_adv


def self_test():
    """Checks `vtrace` against the scalar recursion and the closed-form sum of Espeholt et al."""
    g = torch.Generator().manual_seed(0)
    T, B = 13, 5
    log_rhos = torch.randn(T, B, generator=g, dtype=torch.float64)
    discounts = 0.99 * (torch.rand(T, B, generator=g, dtype=torch.float64) > 0.2).double()
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=g, dtype=torch.float64)
    for rho_bar, c_bar in [(1.0, 1.0), (0.7, 0.5), (100.0, 100.0)]:
        vs, adv = vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, rho_bar, c_bar)
        r, d, v = rewards.numpy(), discounts.numpy(), values.numpy()
        rho = np.exp(log_rhos.numpy())
        vx = np.concatenate([v, bootstrap.numpy()[None]], 0)  # V(x_0..x_T)
        loop_vs, sum_vs = np.zeros((T + 1, B)), np.zeros((T, B))
        loop_vs[T] = vx[T]
        delta = np.minimum(rho_bar, rho) * (r + d * vx[1:] - vx[:-1])
        c = np.minimum(c_bar, rho)
        for b in range(B):
            for t in reversed(range(T)):  # vs_t = V_t + delta_t + gamma_t c_t (vs_{t+1} - V_{t+1})
                loop_vs[t, b] = vx[t, b] + delta[t, b] + d[t, b] * c[t, b] * (loop_vs[t + 1, b] - vx[t + 1, b])
            for t in range(T):  # vs_t = V_t + sum_s (prod_{i<s} gamma_i c_i) delta_s
                w, total = 1.0, 0.0
                for s in range(t, T):
                    total += w * delta[s, b]
                    w *= d[s, b] * c[s, b]
                sum_vs[t, b] = vx[t, b] + total
        loop_adv = np.minimum(rho_bar, rho) * (r + d * loop_vs[1:] - v)
        errs = [np.abs(vs.numpy() - loop_vs[:T]).max(), np.abs(vs.numpy() - sum_vs).max(),
                np.abs(adv.numpy() - loop_adv).max()]
        ok = max(errs) < 1e-10
        print(json.dumps({"self_test": "vtrace", "rho_bar": rho_bar, "c_bar": c_bar,
                          "max_err": float(max(errs)), "ok": bool(ok)}))
        assert ok, errs


class GymAsParallel:
    """A Gymnasium env seen through PettingZoo's ParallelEnv API with the one agent `agent`, so that
    single- and multi-agent runs share one sampler."""

    possible_agents = ["agent"]

    def __init__(self, env):
        self.env = env

    def observation_space(self, agent):
        return self.env.observation_space

    def action_space(self, agent):
        return self.env.action_space

    def reset(self, seed=None):
        o, info = self.env.reset(seed=seed)
        return {"agent": o}, {"agent": info}

    def step(self, actions):
        return tuple({"agent": x} for x in self.env.step(actions["agent"]))


def make_env(env_id, parallel=False, kwargs=None):
    """A Gymnasium id, or `module:Class` for an env class importable from PYTHONPATH (a
    `gymnasium.Env`, or a PettingZoo `ParallelEnv` when `parallel`), as a ParallelEnv."""
    kwargs = kwargs or {}
    if parallel or (":" in env_id and not env_id.startswith("ALE/")):
        module, name = env_id.split(":", 1)
        env = getattr(importlib.import_module(module), name)(**kwargs)
        return env if parallel else GymAsParallel(env)
    return GymAsParallel(gym.make(env_id, **kwargs))


def check_agents(keys, agents, what):
    if set(keys) != set(agents):
        raise ValueError(f"every agent must act at every step: {what} names {sorted(keys)}, "
                         f"the env's agents are {sorted(agents)}")


class Sampler:
    """`num_envs` envs in a plain list; every agent acts at every step of every env."""

    def __init__(self, make, num_envs, seed, gamma):
        self.envs = [make() for _ in range(num_envs)]
        self.agents = list(self.envs[0].possible_agents)
        first = [e.reset(seed=seed * 1000 + i)[0] for i, e in enumerate(self.envs)]
        for o in first:
            check_agents(o, self.agents, "reset's observation")
        self.obs = {a: np.stack([o[a] for o in first]) for a in self.agents}
        self.ep_ret = {a: np.zeros(num_envs) for a in self.agents}
        self.returns = {a: collections.deque(maxlen=100) for a in self.agents}
        self.gamma = gamma

    @torch.no_grad()
    def fragment(self, models, T):
        """T steps of every env, per agent: obs [T, B, D], actions, behaviour log-probs, rewards,
        discounts, and the observations [B, D] after the last step."""
        B = len(self.envs)
        obs = {a: np.zeros((T, B, self.obs[a].shape[1]), np.float32) for a in self.agents}
        acts = {a: np.zeros((T, B), np.int64) for a in self.agents}
        logps, rews, discs = ({a: np.zeros((T, B), np.float32) for a in self.agents} for _ in range(3))
        for t in range(T):
            for a in self.agents:
                obs[a][t] = self.obs[a]
                logits, _ = models[a](torch.as_tensor(self.obs[a], dtype=torch.float32))
                dist = torch.distributions.Categorical(logits=logits)
                act = dist.sample()
                acts[a][t], logps[a][t] = act.numpy(), dist.log_prob(act).numpy()
            for i, env in enumerate(self.envs):
                o, r, term, trunc, _ = env.step({a: int(acts[a][t, i]) for a in self.agents})
                for what, d in [("step's observation", o), ("step's rewards", r), ("step's terminations", term),
                                ("step's truncations", trunc)]:
                    check_agents(d, self.agents, what)
                ended = [term[a] or trunc[a] for a in self.agents]
                if any(ended) and not all(ended):
                    raise ValueError(f"every agent must act at every step: only some agents ended ({term}, {trunc})")
                for a in self.agents:
                    self.ep_ret[a][i] += r[a]
                    rews[a][t, i], discs[a][t, i] = r[a], self.gamma
                    if term[a]:
                        discs[a][t, i] = 0.0
                    elif trunc[a]:  # fold gamma * V_behaviour(final obs) into the reward, then cut
                        v = models[a](torch.as_tensor(o[a][None], dtype=torch.float32))[1][0]
                        rews[a][t, i] += self.gamma * float(v)
                        discs[a][t, i] = 0.0
                    if ended[0]:
                        self.returns[a].append(self.ep_ret[a][i])
                        self.ep_ret[a][i] = 0.0
                if ended[0]:
                    o, _ = env.reset()
                    check_agents(o, self.agents, "reset's observation")
                for a in self.agents:
                    self.obs[a][i] = o[a]
        return {a: (obs[a], acts[a], logps[a], rews[a], discs[a], self.obs[a].copy()) for a in self.agents}


class Learner:
    """One agent's model, optimizer and behaviour weights (those of `lag` updates ago)."""

    def __init__(self, args, obs_dim, num_actions):
        self.args = args
        self.model = MODELS[args.model](obs_dim, num_actions)
        self.behaviour = copy.deepcopy(self.model)
        self.snapshots = collections.deque([copy.deepcopy(self.model.state_dict())], maxlen=args.lag + 1)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.stats = {"entropy": None, "rho_mean": None, "grad_norm": None}

    def update(self, frags):
        """One update on this agent's fragments, side by side: [T, B] rows along axis 1, bootstrap
        observations [B, D] along axis 0. Returns the number of agent steps trained on."""
        args, model = self.args, self.model
        obs, acts, blogp, rews, discs = (torch.as_tensor(np.concatenate(x, 1)) for x in list(zip(*frags))[:5])
        boot = torch.as_tensor(np.concatenate([f[5] for f in frags], 0))
        T, B = acts.shape
        logits, values = model(torch.cat([obs.reshape(T * B, -1), boot], 0))
        bootstrap, values = values[T * B:].detach(), values[:T * B].reshape(T, B)
        dist = torch.distributions.Categorical(logits=logits[:T * B].reshape(T, B, -1))
        logp, ent = dist.log_prob(acts), dist.entropy()
        log_rhos = logp.detach() - blogp
        vs, pg_adv = vtrace(log_rhos, discs, rews, values.detach(), bootstrap)
        pi_loss = -(logp * pg_adv).sum()
        vf_loss = 0.5 * (values - vs).pow(2).sum()
        entropy = ent.sum()
        if args.loss_reduction == "mean":
            pi_loss, vf_loss, entropy = pi_loss / (T * B), vf_loss / (T * B), entropy / (T * B)
        loss = pi_loss + args.vf_loss_coeff * vf_loss - args.entropy_coeff * entropy
        self.opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        self.opt.step()
        self.snapshots.append(copy.deepcopy(model.state_dict()))
        self.behaviour.load_state_dict(self.snapshots[0])  # the weights of `lag` updates ago
        self.stats = {"entropy": float(ent.detach().mean()), "rho_mean": float(log_rhos.exp().mean()),
                      "grad_norm": float(gn)}
        return T * B


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--parallel-env", default=None, help="module:Class, a PettingZoo ParallelEnv (multi-agent mode)")
    p.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON object passed to the env's constructor")
    p.add_argument("--target-return", type=float, default=8.0, help="multi-agent: report when each agent's mean first reaches it")
    p.add_argument("--model", choices=list(MODELS), default="residual")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--fragment", type=int, default=50)
    p.add_argument("--batch", type=int, default=800)
    p.add_argument("--lag", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.0005)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--vf-loss-coeff", type=float, default=0.05)
    p.add_argument("--entropy-coeff", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=40.0)
    p.add_argument("--loss-reduction", choices=["mean", "sum"], default="mean")
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--env-steps", type=int, default=None)
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.self_test:
        self_test()
        return
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    multi = args.parallel_env is not None
    env_id = args.parallel_env if multi else args.env
    sampler = Sampler(lambda: make_env(env_id, multi, args.env_kwargs), args.num_envs, args.seed, args.gamma)
    learners = {a: Learner(args, sampler.obs[a].shape[1], int(sampler.envs[0].action_space(a).n))
                for a in sampler.agents}
    frags_per_batch = max(1, args.batch // (args.fragment * args.num_envs))

    start = last_print = time.time()
    env_steps = updates = 0
    first_450 = min_after_450 = None
    held = None
    peak = 0.0
    collapsed = False
    first_target = {a: None for a in sampler.agents}  # (seconds, env steps)

    def return_mean(a):
        return float(np.mean(sampler.returns[a])) if sampler.returns[a] else None

    def line(t):
        head = {"t": round(t, 2), "env_steps": env_steps}
        if not multi:
            return {**head, "return_mean": return_mean("agent"), **learners["agent"].stats, "updates": updates}
        return {**head, "updates": updates,
                "agents": {a: {"return_mean": return_mean(a), **l.stats} for a, l in learners.items()}}

    while True:
        t = time.time() - start
        if t >= args.seconds or (args.env_steps is not None and env_steps >= args.env_steps):
            break
        frags = [sampler.fragment({a: l.behaviour for a, l in learners.items()}, args.fragment)
                 for _ in range(frags_per_batch)]
        for a, l in learners.items():
            steps = l.update([f[a] for f in frags])
        env_steps += steps  # every agent acts at every env step
        updates += 1

        t = time.time() - start
        for a in sampler.agents:
            rm = return_mean(a)
            if multi and rm is not None and first_target[a] is None and rm >= args.target_return:
                first_target[a] = (round(t, 2), env_steps)
        if not multi and sampler.returns["agent"]:
            rm = return_mean("agent")
            peak = max(peak, rm)
            collapsed |= peak >= 130 and rm < 30
            if first_450 is None and rm >= 450:
                first_450, min_after_450 = t, rm
            elif first_450 is not None:
                min_after_450 = min(min_after_450, rm)
                if held is None and rm < 400 and t - first_450 <= 60:
                    held = False
                if held is None and t - first_450 > 60:
                    held = True
        if time.time() - last_print >= 2.0:
            last_print = time.time()
            print(json.dumps(line(t)), flush=True)

    final = line(time.time() - start)
    print(json.dumps(final), flush=True)
    head = {"summary": True, "model": args.model, "seed": args.seed, "lag": args.lag,
            "loss_reduction": args.loss_reduction, "env_steps": env_steps, "updates": updates}
    if multi:
        print(json.dumps({**head, "parallel_env": args.parallel_env, "env_kwargs": args.env_kwargs, "lr": args.lr,
                          "target_return": args.target_return, "agents": {
                              a: {"final_return_mean": return_mean(a), "final_entropy": l.stats["entropy"],
                                  "first_target_s": first_target[a] and first_target[a][0],
                                  "first_target_env_steps": first_target[a] and first_target[a][1]}
                              for a, l in learners.items()}}), flush=True)
        return
    print(json.dumps({**head, "first_450_s": None if first_450 is None else round(first_450, 2),
                      "held_60s_after": held, "min_return_after_450": min_after_450,
                      "final_return_mean": final["return_mean"], "final_entropy": final["entropy"],
                      "peak_return_mean": peak, "collapsed": collapsed}), flush=True)


if __name__ == "__main__":
    main()
