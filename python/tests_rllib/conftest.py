"""Tests that need RLlib itself (``ray[rllib]==2.60.0``, which pins gymnasium 1.2.2): users'
RLModule classes and RLlib's tuned examples run with only the import changed. ``./dev test``
runs them in the second virtualenv, ``.venv-rllib``, together with ``python/tests``."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def rllib_is_installed():
    """A missing RLlib is an error here, never a skip."""
    try:
        import ray.rllib  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"these tests need ray[rllib]==2.60.0 ({exc}); run them with ./dev test")
