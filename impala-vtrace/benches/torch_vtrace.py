"""Times RLlib's torch V-trace on this CPU, for comparison with `cargo bench --bench vtrace`.

The function below re-writes the algorithm of RLlib's `vtrace_torch.from_importance_weights`
(the loop over `reversed(range(T))`, from the reference notes' pseudo-code in
`reference/rllib-impala-notes.md` section 1.1) with the same torch ops RLlib runs. Same shapes as
the Rust bench: T = 50, B in {32, 256, 1024}, float32, one intra-op thread.

Run: /work/main/.venv/bin/python impala-vtrace/benches/torch_vtrace.py
"""

import math
import time
import warnings

# torch warns once when NumPy is absent (the venv has none); nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0):
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else torch.clamp_max(rhos, clip_rho_threshold)
    cs = torch.clamp_max(rhos, 1.0)
    values_t_plus_1 = torch.cat([values[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
    vs_minus_v_xs = [torch.zeros_like(bootstrap_value)]
    for i in reversed(range(len(discounts))):
        vs_minus_v_xs.append(deltas[i] + discounts[i] * cs[i] * vs_minus_v_xs[-1])
    vs_minus_v_xs = torch.flip(torch.stack(vs_minus_v_xs[1:]), dims=[0])
    vs = vs_minus_v_xs + values
    vs_t_plus_1 = torch.cat([vs[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
    clipped_pg_rhos = (rhos if clip_pg_rho_threshold is None
                       else torch.clamp_max(rhos, clip_pg_rho_threshold))
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return vs.detach(), pg_advantages.detach()


def inputs(t, b):
    """The Rust bench's inputs (benches/vtrace.rs `inputs`)."""
    i = torch.arange(t * b, dtype=torch.float32)
    log_rhos = torch.sin(i * 0.37).reshape(t, b)
    discounts = torch.where(torch.arange(t * b) % 37 == 0, 0.0, 0.99).float().reshape(t, b)
    rewards = torch.sin(i * 0.11).reshape(t, b)
    values = (2.0 * torch.sin(i * 0.05)).reshape(t, b)
    bootstrap = torch.sin(torch.arange(b, dtype=torch.float32) * 0.3)
    return log_rhos, discounts, rewards, values, bootstrap


def check_golden():
    """The function reproduces the notes' DeepMind golden values (B = 1, T = 5) first."""
    t, b = 5, 1
    n = torch.arange(t * b, dtype=torch.float64).reshape(t, b)
    vs, pg = from_importance_weights(
        log_rhos=5 * (n / (b * t) - 0.5),
        discounts=torch.full((t, b), 0.9, dtype=torch.float64),
        rewards=n,
        values=n / b,
        bootstrap_value=torch.arange(b, dtype=torch.float64) + 1,
        clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2,
    )
    expected_vs = [0.200182, 2.709682, 8.513628, 11.932397, 7.33]
    expected_pg = [0.200182, 1.709682, 6.513628, 10.876614, 1.98]
    assert torch.allclose(vs[:, 0], torch.tensor(expected_vs, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(pg[:, 0], torch.tensor(expected_pg, dtype=torch.float64), atol=1e-6)


def main():
    check_golden()
    torch.set_num_threads(1)
    t = 50
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    for b in (32, 256, 1024):
        args = inputs(t, b)
        with torch.no_grad():
            for _ in range(20):
                from_importance_weights(*args)
            iters = max(20, 2_000_000 // (t * b))
            best_wall, best_cpu = math.inf, math.inf
            for _ in range(5):
                wall, cpu = time.perf_counter(), time.thread_time()
                for _ in range(iters):
                    from_importance_weights(*args)
                best_wall = min(best_wall, (time.perf_counter() - wall) / iters)
                best_cpu = min(best_cpu, (time.thread_time() - cpu) / iters)
        # Thread CPU time as well as wall time: on a shared machine the wall clock also counts
        # time spent waiting for a core.
        print(f"T={t} B={b}: wall {best_wall * 1e9 / (t * b):7.2f} ns/element "
              f"({best_wall * 1e6:7.1f} us/call), thread CPU {best_cpu * 1e9 / (t * b):7.2f} "
              f"ns/element ({best_cpu * 1e6:7.1f} us/call), best of 5")

if __name__ == "__main__":
    main()
