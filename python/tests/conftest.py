"""Shared fixtures: the `impala` binary (built by `cargo test`/`cargo build --release`, which
`./dev test` runs first) and small fast configs."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def impala_bin():
    """The release `impala` command; a missing one is an error, not a skip."""
    path = Path(os.environ.get("IMPALA_BIN", REPO / "target" / "release" / "impala"))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build --release -p impala-cli`")
    return str(path)


def fast_cartpole():
    """CartPole with short iterations and one env runner, for tests that train briefly."""
    from impala_rs import IMPALAConfig

    return (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4, rollout_fragment_length=50)
        .training(train_batch_size=400, model={"fcnet_hiddens": [32]})
        .reporting(min_time_s_per_iteration=0.3)
        .debugging(seed=0)
    )


def tuned_cartpole():
    """CartPole-v1 with examples/cartpole-impala.toml's settings (tuned for a 2-core machine:
    450 in about 2 s with one runner thread)."""
    from impala_rs import IMPALAConfig

    return (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8, rollout_fragment_length=10)
        .training(
            train_batch_size=80,
            lr=0.0003,
            entropy_coeff=0.01,
            opt_type="rmsprop",
            decay=0.99,
            epsilon=0.1,
            momentum=0.0,
            _separate_vf_optimizer=True,
            _lr_vf=0.003,
            grad_clip=40.0,
        )
        .learners(num_learner_threads=1)
        .reporting(min_time_s_per_iteration=0.25)
        .debugging(seed=0)
    )
