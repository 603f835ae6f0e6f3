"""Impala from Python: training, evaluation, checkpoints shared with the `impala` command,
the interpreter lock released while Rust trains, Ctrl-C."""

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import fast_cartpole
from impala_rs import Impala, ImpalaError, IMPALAConfig


def test_train_evaluate_save_restore(tmp_path):
    with fast_cartpole().evaluation(evaluation_duration=2).build() as algo:
        first = algo.train()
        second = algo.train()
        assert (first["training_iteration"], second["training_iteration"]) == (1, 2)
        assert second["num_env_steps_sampled"] > first["num_env_steps_sampled"]
        for key in ["episode_return_mean", "time_total_s", "timesteps_total", "info", "env_runners"]:
            assert key in second
        evaluation = algo.evaluate()["env_runners"]
        assert evaluation["num_episodes"] == 2
        path = algo.save(tmp_path)
        assert path.endswith("checkpoint_000002")
    with pytest.raises(ImpalaError, match="stopped"):
        algo.train()

    restored = Impala.from_checkpoint(path)
    try:
        assert restored.iteration == 2
        assert restored.train()["training_iteration"] == 3
    finally:
        restored.stop()


def test_checkpoint_from_python_evaluates_with_the_cli(tmp_path, impala_bin):
    algo = fast_cartpole().build()
    algo.train()
    path = algo.save(tmp_path / "ckpt")
    algo.stop()
    done = subprocess.run(
        [impala_bin, "evaluate", "--checkpoint", path, "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    evaluation = json.loads(done.stdout.strip().splitlines()[-1])
    assert evaluation["num_episodes"] == 2


def test_checkpoint_from_the_cli_restores_in_python(tmp_path, impala_bin):
    run = tmp_path / "run"
    done = subprocess.run(
        [impala_bin, "train", "--stop-iters", "1", "--run-dir", str(run),
         "--set", "num_env_runners=1", "--set", "min_time_s_per_iteration=0.3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    algo = Impala.from_checkpoint(run)
    try:
        assert algo.iteration == 1
        assert algo.train()["training_iteration"] == 2
    finally:
        algo.stop()


def test_training_releases_the_interpreter_lock():
    algo = fast_cartpole().reporting(min_time_s_per_iteration=1.0).build()
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        start = time.monotonic()
        algo.train()
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
        algo.stop()
    during = [t for t in ticks if start <= t <= start + took]
    # Ticking every 10 ms for about a second: a held lock would allow almost none.
    assert len(during) > 0.5 * took / 0.01, (len(during), took)


CTRL_C_SCRIPT = r"""
import signal, sys, time
# Python's Ctrl-C handler, as at a terminal: a test run started in the background by a
# non-interactive shell inherits SIGINT ignored, and Python (and impala_rs) then leave it so.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
from conftest import fast_cartpole
algo = fast_cartpole().reporting(min_time_s_per_iteration=60).build()
print("training", flush=True)
start = time.monotonic()
try:
    algo.train()
    print("not interrupted", flush=True)
except KeyboardInterrupt as e:
    # The shortened iteration counts; its result comes with the exception.
    assert e.result["training_iteration"] == 1, e.result
    print(f"interrupted after {time.monotonic() - start:.1f}", flush=True)
print("saved", algo.save(sys.argv[2]), flush=True)
algo.stop()
"""


def test_ctrl_c_interrupts_train_and_keeps_the_algorithm(tmp_path):
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, tests, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "training"
    time.sleep(1.5)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("interrupted after"), out
    assert float(lines[0].split()[-1]) < 30
    assert lines[1].startswith("saved ") and lines[1].endswith("checkpoint_000001"), out


def test_bad_env_is_a_clear_error_at_build():
    with pytest.raises(ImpalaError, match="NoSuchEnv"):
        IMPALAConfig().environment("NoSuchEnv-v0").env_runners(num_env_runners=1).build()


def test_a_model_too_large_for_the_machine_raises_instead_of_aborting():
    huge = fast_cartpole().training(model={"fcnet_hiddens": [100_000_000, 100_000_000]})
    with pytest.raises(ImpalaError, match="model is too large"):
        huge.build()


def test_logs_are_plain_text_when_stderr_is_not_a_terminal():
    import os

    # A runner whose env crashes at its 60th step, after its first fragment of 50, is logged as
    # failed and restarted (one that crashed before its first fragment every time would be a
    # broken env, which ends the run).
    script = (
        "from impala_rs import IMPALAConfig\n"
        "algo = IMPALAConfig().environment('CartPoleCrashing-v1',"
        " env_config={'p_crash': 0, 'crash_after_n_steps': 60})"
        ".env_runners(num_env_runners=1).reporting(min_time_s_per_iteration=0.2).build()\n"
        "algo.train()\n"
        "algo.stop()\n"
    )
    env = dict(os.environ, IMPALA_LOG="info")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "env runner failed" in done.stderr, done.stderr
    assert "\x1b[" not in done.stderr, repr(done.stderr[:500])


HANGING_ENV = '''
import time
import gymnasium as gym
import numpy as np


class Hang(gym.Env):
    """Steps normally 20 times, then hangs in its step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = getattr(self, "t", 0)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 20:
            time.sleep(3600)
        return np.zeros(2, np.float32), 1.0, False, self.t % 10 == 0, {}
'''

STOP_SCRIPT = """
import os, time
from impala_rs import IMPALAConfig
algo = (IMPALAConfig().environment("hangmod:Hang").env_runners(num_env_runners=1)
        .reporting(min_time_s_per_iteration=1.0).build())
algo.train()
start = time.monotonic()
algo.stop()
print(f"stopped after {time.monotonic() - start:.1f}", flush=True)
time.sleep(1.0)
me = str(os.getpid())
children = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    fields = stat.rsplit(")", 1)[1].split()
    if fields[1] == me and fields[0] != "Z":
        children.append(pid)
print("children", len(children), flush=True)
"""


def test_stop_with_a_hung_env_kills_its_worker_and_returns_within_the_grace(tmp_path):
    (tmp_path / "hangmod.py").write_text(HANGING_ENV)
    done = subprocess.run(
        [sys.executable, "-c", STOP_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("stopped after"), done.stdout
    # The default shutdown_grace_s is 5 s; the env's own timeout (sample_timeout_s) is 60 s.
    assert float(lines[0].split()[-1]) < 30, done.stdout
    assert lines[1] == "children 0", done.stdout + done.stderr
