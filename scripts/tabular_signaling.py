"""Independent tabular actor-critic on the two-agent Lewis signalling game: the reference that says
the game is solvable by independent learners, with no network, optimizer or V-trace involved.

    PYTHONPATH=impala-gym/tests/envs .venv/bin/python scripts/tabular_signaling.py --seed 1

The game is `SignalingParallel` (reward="signal") from impala-gym/tests/envs/impala_test_envs.py,
imported (so PYTHONPATH must name that folder): each of 10 steps the speaker sees a random bit and
emits a symbol, the listener sees the symbol of the step before and names a bit; both get 1 when
it is the bit behind that symbol (9 a game at best, 4.5 at random).

Per agent a table of logits and a table of values, one row per observation (speaker: 2, the bit;
listener: 3, none/0/1). After each episode, per agent and step in order: G_t = the Monte-Carlo
return (gamma 0.99), adv = G_t - V(s_t); V(s_t) += vf_lr * adv; logits(s_t) += lr * (adv *
grad log pi(a_t|s_t) + entropy_coeff * grad H(pi(.|s_t))). Every 20k env steps one JSON line:
env steps, the listener's mean return over the last 100 episodes, and per agent the mean policy
entropy over the steps acted since the previous line. A final summary line gives the env steps at
which the listener's mean first reached 8.0 (null if never).
"""

import argparse
import collections
import json

import numpy as np

from impala_test_envs import SignalingParallel


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--vf-lr", type=float, default=0.1)
    p.add_argument("--entropy-coeff", type=float, default=0.0)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--env-steps", type=int, default=400_000)
    p.add_argument("--report-every", type=int, default=20_000)
    p.add_argument("--target-return", type=float, default=8.0)
    args = p.parse_args()

    env = SignalingParallel(reward="signal")
    rng = np.random.default_rng(args.seed)
    obs, _ = env.reset(seed=args.seed)
    agents = list(env.possible_agents)
    logits = {a: np.zeros((env.observation_space(a).shape[0], env.action_space(a).n)) for a in agents}
    values = {a: np.zeros(env.observation_space(a).shape[0]) for a in agents}
    returns = collections.deque(maxlen=100)  # the listener's
    ent_sum, ent_n = {a: 0.0 for a in agents}, 0
    env_steps, next_report, first_target = 0, args.report_every, None

    while env_steps < args.env_steps:
        traj = {a: [] for a in agents}  # (state, action, reward) per step
        done = False
        while not done:
            actions, states = {}, {}
            for a in agents:
                s = int(np.argmax(obs[a]))
                pi = softmax(logits[a][s])
                actions[a], states[a] = int(rng.choice(len(pi), p=pi)), s
                ent_sum[a] -= float((pi * np.log(pi)).sum())
            ent_n += 1
            obs, rew, term, trunc, _ = env.step(actions)
            for a in agents:
                traj[a].append((states[a], actions[a], rew[a]))
            env_steps += 1
            done = all(term.values()) or all(trunc.values())
        returns.append(sum(r for _, _, r in traj["listener"]))
        obs, _ = env.reset()

        for a in agents:
            g, gs = 0.0, []
            for _, _, r in reversed(traj[a]):
                g = r + args.gamma * g
                gs.append(g)
            for (s, act, _), g in zip(traj[a], reversed(gs)):
                adv = g - values[a][s]
                values[a][s] += args.vf_lr * adv
                pi = softmax(logits[a][s])
                grad = -pi
                grad[act] += 1.0  # d log pi(act) / d logits
                logp = np.log(pi)
                grad_h = -pi * (logp - (pi * logp).sum())  # d H / d logits
                logits[a][s] += args.lr * (adv * grad + args.entropy_coeff * grad_h)

        mean = float(np.mean(returns))
        if first_target is None and len(returns) == returns.maxlen and mean >= args.target_return:
            first_target = env_steps
        if env_steps >= next_report:
            next_report += args.report_every
            print(json.dumps({"env_steps": env_steps, "listener_return_mean": mean,
                              "entropy": {a: ent_sum[a] / ent_n for a in agents}}), flush=True)
            ent_sum, ent_n = {a: 0.0 for a in agents}, 0

    print(json.dumps({"summary": True, "seed": args.seed, "lr": args.lr, "vf_lr": args.vf_lr,
                      "entropy_coeff": args.entropy_coeff, "env_steps": env_steps,
                      "first_target_env_steps": first_target, "target_return": args.target_return,
                      "final_listener_return_mean": float(np.mean(returns)),
                      "policies": {a: [softmax(z).round(3).tolist() for z in logits[a]] for a in agents}}),
          flush=True)


if __name__ == "__main__":
    main()
