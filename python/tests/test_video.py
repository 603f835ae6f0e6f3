"""Watching the trained agent play: ``record_video`` writes one H.264 MP4 per episode holding
the reset frame and one frame per step, named by its return; Atari's policy sees exactly the
observations the env workers trained it on while the video shows the RGB screen; the command
prints one JSON line per episode; each mistake a user can fix is one line naming the fix."""

import importlib.util
import json
import os
import subprocess
import sys

import gymnasium as gym
import imageio_ffmpeg
import numpy as np
import pytest

from impala_rs import IMPALAConfig, Policy, record_video, register_env

from conftest import REPO, fast_cartpole

#: examples/pong-impala-fast.toml's frames: the playing field cropped, area-averaged to 42x42.
PONG_ENV_CONFIG = {"repeat_action_probability": 0.0, "img_height": 42, "img_width": 42, "crop": {"top": 34, "bottom": 16}}


@pytest.fixture(scope="module")
def cartpole_checkpoint(tmp_path_factory):
    with fast_cartpole().build() as algo:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("cartpole"))


@pytest.fixture(scope="module")
def pong_checkpoint(tmp_path_factory):
    """Pong after one short iteration: an untrained policy, but the run's real spaces and
    frame preprocessing."""
    config = (
        IMPALAConfig()
        .environment("ALE/Pong-v5", env_config=PONG_ENV_CONFIG)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=10)
        .training(train_batch_size=20, model={"conv_filters": [[16, 4, 2], [32, 4, 2], [256, 11, 1]]})
        .reporting(min_time_s_per_iteration=0.1)
        .debugging(seed=0)
    )
    with config.build() as algo:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("pong"))


def video_facts(path):
    """`(frames, seconds, (width, height), fps)` of an MP4, read back by ffmpeg."""
    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    reader.close()
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(path)
    return frames, seconds, tuple(meta["size"]), meta["fps"]


def test_each_cartpole_episode_is_an_mp4_of_its_frames_named_by_its_return(cartpole_checkpoint, tmp_path):
    episodes = record_video(cartpole_checkpoint, tmp_path, episodes=2, seed=0)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(e["path"]) for e in episodes)
    for index, episode in enumerate(episodes):
        assert os.path.basename(episode["path"]) == f"episode-{index:03d}-return-{episode['episode_return']:.1f}.mp4"
        assert episode["frames"] == episode["episode_len"] + 1
        frames, seconds, size, fps = video_facts(episode["path"])
        assert (frames, size, fps) == (episode["frames"], (600, 400), 50.0)
        assert seconds == pytest.approx(frames / 50, abs=0.02)
    # The greedy policy in a plain Gymnasium loop from the same seed plays the same first episode.
    policy, env = Policy.from_checkpoint(cartpole_checkpoint), gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(int(policy.compute_single_action(obs, explore=False)[0]))
        total, done = total + reward, terminated or truncated
    assert episodes[0]["episode_return"] == total


def test_the_command_prints_a_json_line_per_episode_and_numbers_on(cartpole_checkpoint, tmp_path):
    (tmp_path / "episode-004-return-9.0.mp4").write_bytes(b"")  # an earlier recording's
    command = [sys.executable, "-m", "impala_rs.video", "--checkpoint", cartpole_checkpoint]
    command += ["--video", str(tmp_path), "--episodes", "2", "--max-steps", "7", "--seed", "3"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [os.path.basename(e["path"])[:12] for e in lines] == ["episode-005-", "episode-006-"]
    for episode in lines:
        assert episode["episode_len"] <= 7
        assert os.path.basename(episode["path"]).endswith(f"-return-{episode['episode_return']:.1f}.mp4")
        assert video_facts(episode["path"])[0] == episode["frames"] == episode["episode_len"] + 1


def test_pong_plays_on_the_training_observations_and_films_the_rgb_screen(pong_checkpoint, tmp_path):
    (episode,) = record_video(pong_checkpoint, tmp_path, seed=0, max_steps=30)
    assert (episode["episode_len"], episode["frames"]) == (30, 31)
    assert os.path.basename(episode["path"]) == f"episode-000-return-{episode['episode_return']:.1f}.mp4"
    # ALE's 160x210 screen at one frame per agent step: 60 / frameskip 4.
    assert video_facts(episode["path"])[::2] == (31, (160, 210))
    assert video_facts(episode["path"])[3] == 15.0


def load_env_worker():
    """impala-gym's env worker script, whose AtariEnvs made the observations in training."""
    path = REPO / "impala-gym" / "python" / "impala_gym_worker.py"
    spec = importlib.util.spec_from_file_location("impala_gym_worker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STICKY = {"repeat_action_probability": 0.25}


@pytest.mark.parametrize("env_config", [STICKY, {**PONG_ENV_CONFIG, **STICKY}], ids=["whole-screen", "crop"])
def test_atari_observations_are_the_env_workers(env_config):
    from impala_rs.video import _AtariPlayer

    worker = load_env_worker().AtariEnvs({"count": 1, "env": "ALE/Pong-v5", "env_config": env_config}, np, gym)
    player = _AtariPlayer("ALE/Pong-v5", env_config)
    (expected, _), (obs, screen) = worker.reset(0, 7), player.reset(7)
    np.testing.assert_array_equal(obs, expected)
    assert screen.shape == (210, 160, 3) and len(np.unique(screen.reshape(-1, 3), axis=0)) > 2
    # Sticky actions and random actions: both draw from the seeded game alike.
    for action in np.random.default_rng(0).integers(0, 6, 60):
        worker.gather_step(0, action)
        ((expected, _, reward, terminated, _, _),), _ = worker.step_all()
        obs, _, player_reward, done = player.step(action)
        np.testing.assert_array_equal(obs, expected)
        assert (player_reward, done) == (reward, terminated)
    player.close()


class Dot(gym.Env):
    """A dot walking on a line, drawn on odd-sized frames (21x33: padded to even for H.264)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = 0.0, 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        assert -1.0 <= action[0] <= 1.0, "Box actions are clipped as in training"
        self.x, self.t = float(np.clip(self.x + 0.1 * action[0], -1, 1)), self.t + 1
        return np.array([self.x], np.float32), 1.0, False, self.t >= 6, {}

    def render(self):
        frame = np.zeros((21, 33, 3), np.uint8)
        frame[10, int((self.x + 1) * 16)] = 255
        return frame


def make_dot(env_config):
    """RLlib's creator convention: the render mode comes in `env_config`."""
    return Dot(render_mode=env_config.get("render_mode"))


class Blind(gym.Env):
    """An env that cannot draw itself (no render_mode argument)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {}


def test_an_algorithm_records_its_current_policy_on_a_registered_env(tmp_path):
    register_env("dot", make_dot)
    config = fast_cartpole().environment("dot", clip_actions=True).env_runners(num_envs_per_env_runner=1)
    with config.build() as algo:
        (episode,) = algo.record_video(tmp_path, explore=True)
    assert (episode["episode_return"], episode["episode_len"], episode["frames"]) == (6.0, 6, 7)
    assert os.listdir(tmp_path) == ["episode-000-return-6.0.mp4"]
    frames, _, size, fps = video_facts(episode["path"])
    assert (frames, size, fps) == (7, (34, 22), 10.0)


def test_an_env_that_cannot_render_is_refused_with_the_fix(tmp_path):
    with fast_cartpole().environment(Blind).build() as algo:
        with pytest.raises(ValueError, match=r"env 'Blind' takes no render_mode .*make it take render_mode='rgb_array'"):
            algo.record_video(tmp_path)
    assert os.listdir(tmp_path) == []


def test_a_missing_checkpoint_or_imageio_ffmpeg_is_one_line_with_the_fix(cartpole_checkpoint, tmp_path, monkeypatch):
    missing = tmp_path / "checkpoint_000009"
    command = [sys.executable, "-m", "impala_rs.video", "--checkpoint", str(missing), "--video", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (
        f"error: record_video: checkpoint {missing} does not exist; pass a checkpoint_NNNNNN folder "
        "or a run folder (algo.save() and `impala train` write them)\n"
    )
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if not installed
    fix = r'needs imageio-ffmpeg, which is not installed: pip install imageio-ffmpeg, or pip install "impala-rs\[video\]"'
    with pytest.raises(ImportError, match=fix):
        record_video(cartpole_checkpoint, tmp_path / "videos")
    assert not (tmp_path / "videos").exists()
