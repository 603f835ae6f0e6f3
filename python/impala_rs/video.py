"""Watching a trained agent play: :func:`record_video` runs a checkpoint's policy on the env it
was trained on and writes one MP4 per episode; ``python -m impala_rs.video`` does the same from
a shell, printing one JSON line per episode (``impala evaluate --video DIR`` runs it).

The policy acts on the observations training gave it while the video shows the env's own
frames (``env.render()`` in ``rgb_array`` mode). Native envs (CartPole-v1, Acrobot-v1,
MountainCar-v0, Pendulum-v1) play their Gymnasium twins, which render. Atari games (``ALE/...``)
run in two ale-py vector envs of one game each, seeded alike so they play in step: one makes
the observations as the env workers did in training (the run's ``env_config``: frameskip,
noops, sticky actions, grayscale, resize, ``crop``, frame stack), the other the RGB screen.
Atari episodes are whole games (``episodic_life`` is ignored). Needs imageio-ffmpeg and
Gymnasium: ``pip install "impala-rs[video]"``.
"""

import argparse
import contextlib
import importlib
import inspect
import json
import os
import random
import re
import sys

import numpy as np

from . import _impala_rs
from .config import IMPALAConfig
from .policy import Policy

#: How to install what recording needs.
INSTALL = 'pip install imageio-ffmpeg, or pip install "impala-rs[video]"'

#: The files :func:`record_video` writes: `episode-<index>-return-<return>.mp4`.
_EPISODE_FILE = re.compile(r"episode-(\d+)-return-.*\.mp4")

#: ALE's screen, `[height, width]`, for every game; the console runs at 60 frames a second.
_ALE_SCREEN = (210, 160)
_ALE_FPS = 60


def record_video(checkpoint, video_dir, episodes=1, explore=False, seed=None, fps=None, max_steps=None):
    """Plays ``episodes`` episodes with a checkpoint's policy (a ``checkpoint_NNNNNN`` folder,
    or a run folder's newest) and writes each as ``video_dir/episode-000-return-21.0.mp4``
    (H.264, numbered on from the episodes already in ``video_dir``). Greedy unless
    ``explore``; ``seed`` seeds the first episode's reset; ``fps`` defaults to the env's
    ``metadata["render_fps"]`` (30 without one; Atari: 60 / frameskip, a frame per agent step);
    ``max_steps`` ends an episode early. Each video holds the reset frame and one frame per
    step. Returns one dict per episode: ``path``, ``episode_return``, ``episode_len``,
    ``frames``. A run on an env given to ``register_env`` (or as a class) needs it registered
    again here."""
    return list(_record_checkpoint(checkpoint, video_dir, episodes, explore, seed, fps, max_steps))


def _record_checkpoint(checkpoint, video_dir, episodes, explore, seed, fps, max_steps):
    path = str(checkpoint)
    # Both checked before the policy loads, so a mistake costs no wait.
    _imageio_ffmpeg()
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"record_video: checkpoint {path} does not exist; pass a checkpoint_NNNNNN folder or "
            "a run folder (algo.save() and `impala train` write them)"
        )
    config = IMPALAConfig.from_dict(_impala_rs.checkpoint_config(path))
    policy = Policy.from_checkpoint(path)
    return record_policy(policy, config, video_dir, episodes, explore, seed, fps, max_steps)


def record_policy(policy, config, video_dir, episodes=1, explore=False, seed=None, fps=None, max_steps=None):
    """Records ``policy`` on ``config``'s env as :func:`record_video` does, yielding each
    episode's dict once its file is written (the command prints it then)."""
    if episodes < 1:
        raise ValueError(f"record_video: episodes={episodes}; record at least 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"record_video: max_steps={max_steps}; allow at least 1 step, or None")
    ffmpeg = _imageio_ffmpeg()
    player = _player(config)
    try:
        fps = float(fps or player.fps)
        os.makedirs(video_dir, exist_ok=True)
        first = _next_index(video_dir)
        for index in range(first, first + episodes):
            episode_seed = seed if index == first else None
            yield _play(policy, player, ffmpeg, video_dir, index, explore, episode_seed, fps, max_steps)
    finally:
        player.close()


def _play(policy, player, ffmpeg, video_dir, index, explore, seed, fps, max_steps):
    """One episode into `video_dir`, under a hidden name until its return names the file."""
    obs, frame = player.reset(seed)
    partial = os.path.join(str(video_dir), f".episode-{index:03d}.mp4")
    video = _Mp4(ffmpeg, partial, frame.shape, fps)
    try:
        video.add(frame)
        state = policy.get_initial_state()
        total, steps, done = 0.0, 0, False
        while not done and (max_steps is None or steps < max_steps):
            action, state, _ = policy.compute_single_action(obs, state, explore=explore)
            obs, frame, reward, done = player.step(action)
            video.add(frame)
            total, steps = total + reward, steps + 1
        video.close()
    except BaseException:
        video.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
        raise
    path = os.path.join(str(video_dir), f"episode-{index:03d}-return-{total:.1f}.mp4")
    os.replace(partial, path)
    return {"path": path, "episode_return": total, "episode_len": steps, "frames": steps + 1}


def _next_index(video_dir):
    """The number after the last episode already in `video_dir`: recording into a folder
    again (every few iterations of a run, say) adds episodes instead of mixing two runs'."""
    taken = [int(m.group(1)) for name in os.listdir(video_dir) if (m := _EPISODE_FILE.fullmatch(name))]
    return max(taken, default=-1) + 1


class _Mp4:
    """An H.264 MP4 fed frame by frame to imageio-ffmpeg's ffmpeg (no episode is held in
    memory). yuv420p, which every player plays, halves the colour resolution, so odd frame
    sizes are padded with a black row or column rather than rescaled."""

    def __init__(self, ffmpeg, path, shape, fps):
        height, width = shape[:2]
        self.pad = ((0, height % 2), (0, width % 2), (0, 0))
        size = (width + width % 2, height + height % 2)
        self.writer = ffmpeg.write_frames(
            path, size, fps=fps, codec="libx264", pix_fmt_out="yuv420p", macro_block_size=2, ffmpeg_log_level="error"
        )
        self.writer.send(None)

    def add(self, frame):
        self.writer.send(np.ascontiguousarray(np.pad(frame, self.pad)))

    def close(self):
        self.writer.close()


def _imageio_ffmpeg():
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise ImportError(f"record_video: writing MP4s needs imageio-ffmpeg, which is not installed: {INSTALL}") from exc
    return imageio_ffmpeg


def _player(config):
    """The env of `config` to play and film: Atari's pair of vector envs, or a Gymnasium env."""
    name, creator = config._env_creator()
    env_config = dict(config["env_config"] or {})
    if creator is None and name.startswith("ALE/"):
        return _AtariPlayer(name, env_config)
    return _GymPlayer(_rendering_env(name, creator, env_config), name)


def _rendering_env(name, creator, env_config):
    """The env built as the env workers build it (`env_config` as keyword arguments, or as
    the one dict an RLlib creator takes), asked for `render_mode="rgb_array"`."""
    try:
        import gymnasium as gym
    except ImportError as exc:
        raise ImportError(f"record_video: rendering {name!r} needs gymnasium, which is not installed: {INSTALL}") from exc
    kwargs = dict(env_config, render_mode="rgb_array")
    if creator is None and ":" in name:
        module, _, attr = name.partition(":")
        creator = importlib.import_module(module)
        for part in attr.split("."):
            creator = getattr(creator, part)
    if creator is None:
        try:
            env = gym.make(name, **kwargs)
        except gym.error.Error as exc:
            raise ValueError(
                f"record_video: {name!r} has no Gymnasium env to render ({exc}); only the native "
                "envs with a Gymnasium twin (CartPole-v1, Acrobot-v1, MountainCar-v0, "
                "Pendulum-v1) and Gymnasium's own envs can be recorded"
            ) from exc
        except TypeError as exc:
            if "render_mode" not in str(exc):
                raise
            raise ValueError(f"record_video: env {name!r} takes no render_mode ({exc}); {_RENDER_FIX}") from exc
    else:
        env = _create(creator, kwargs, name)
        if kwargs.get("max_episode_steps"):
            env = gym.wrappers.TimeLimit(env, int(kwargs["max_episode_steps"]))
    if not isinstance(env, gym.Env):
        raise ValueError(f"record_video: env {name!r} is not a single-agent gymnasium.Env; only those can be recorded")
    if env.render_mode != "rgb_array":
        env.close()
        modes = env.metadata.get("render_modes", [])
        raise ValueError(
            f"record_video: env {name!r} does not render in 'rgb_array' mode (its render_mode is "
            f"{env.render_mode!r}, metadata['render_modes'] {modes}); {_RENDER_FIX}"
        )
    return env


_RENDER_FIX = (
    "make it take render_mode='rgb_array' (a creator gets it in env_config['render_mode']), list "
    "'rgb_array' in metadata['render_modes'] and return an [H, W, 3] uint8 frame from render()"
)


def _create(creator, kwargs, name):
    """`creator` called as the env workers call it: a `gymnasium.Env` subclass with keywords,
    a creator with RLlib's one `env_config` dict when it takes one positional argument (it is
    to pass `render_mode` on), else with keywords, which must take `render_mode`."""
    try:
        params = list(inspect.signature(creator).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): it takes keywords
        return creator(**kwargs)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = any(p.kind == p.VAR_KEYWORD for p in params)
    if not isinstance(creator, type) and len(positional) == 1 and not keywords:
        return creator(kwargs)
    if not keywords and all(p.name != "render_mode" for p in params):
        raise ValueError(f"record_video: env {name!r} takes no render_mode argument; {_RENDER_FIX}")
    return creator(**kwargs)


class _GymPlayer:
    """A Gymnasium env: observations as the env workers hand them to the policy, its actions
    as they hand them to the env, and `render()` frames."""

    def __init__(self, env, name):
        from gymnasium import spaces

        self.env, self.name = env, name
        self.fps = env.metadata.get("render_fps") or 30
        obs_space, act_space = env.observation_space, env.action_space
        if isinstance(obs_space, (spaces.Dict, spaces.Tuple)):
            self.observe = lambda obs: spaces.flatten(obs_space, obs)
        elif isinstance(obs_space, spaces.Discrete):
            self.observe = lambda obs: int(obs) - int(obs_space.start)
        else:
            self.observe = lambda obs: obs
        if isinstance(act_space, spaces.Discrete):
            self.act = lambda a: int(a) + int(act_space.start)
        elif isinstance(act_space, spaces.MultiDiscrete):
            self.act = lambda a: np.asarray(a, np.int64).reshape(act_space.shape)
        elif isinstance(act_space, spaces.MultiBinary):
            self.act = lambda a: np.asarray(a, np.int8).reshape(act_space.shape)
        else:
            # Box actions are clipped to the space, as in training.
            low, high = act_space.low, act_space.high
            self.act = lambda a: np.clip(np.reshape(a, act_space.shape), low, high).astype(act_space.dtype)

    def reset(self, seed):
        obs, _ = self.env.reset(seed=seed)
        return self.observe(obs), self.frame()

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(self.act(action))
        return self.observe(obs), self.frame(), float(reward), bool(terminated or truncated)

    def frame(self):
        frame = self.env.render()
        shape = getattr(frame, "shape", None)
        if shape is None or len(shape) != 3 or shape[2] != 3:
            raise ValueError(
                f"record_video: env {self.name!r}'s render() returned {type(frame).__name__} of shape "
                f"{shape}, not an [H, W, 3] frame; {_RENDER_FIX}"
            )
        return np.asarray(frame, np.uint8)

    def close(self):
        self.env.close()


class _AtariPlayer:
    """An Atari game as the env workers train on it (impala-gym's `AtariEnvs`), filmed by a
    twin vector env of the RGB screen. Both are seeded with one seed at the first reset (a
    random one unless given) and take the same actions, so ALE's noops and sticky actions
    draw alike; a reward or an ending that differs between them is an error."""

    def __init__(self, env_id, env_config):
        import ale_py

        kwargs = dict(env_config)
        kwargs.pop("episodic_life", None)
        crop = kwargs.pop("crop", None)
        size = (kwargs.pop("img_height", 84), kwargs.pop("img_width", 84))
        self.stack = kwargs.pop("stack_num", 4)
        # Returns unclipped unless the run clipped them in the env, as the worker has it; a
        # game that ends is not reset by ale-py, so its last screen is filmed.
        kwargs.setdefault("reward_clipping", False)
        kwargs.update(num_envs=1, stack_num=1, autoreset_mode="NextStep")
        game = env_id.split("/", 1)[1].split("-", 1)[0]
        game = "".join("_" + c.lower() if c.isupper() else c for c in game).lstrip("_")
        self.fps = _ALE_FPS / kwargs.get("frameskip", 4)
        # Unstacked frames, stacked here so that the frames from before a game repeat its
        # first, as the worker's do. ale-py resizes only the whole screen: a crop gets it
        # whole and is cut and area-averaged here as the worker does.
        self.crop = None
        if crop is not None:
            self.crop = _Crop(crop, size)
            size = _ALE_SCREEN
        self.observer = ale_py.AtariVectorEnv(game, img_height=size[0], img_width=size[1], **kwargs)
        screen = dict(kwargs, grayscale=False, maxpool=False)
        self.camera = ale_py.AtariVectorEnv(game, img_height=_ALE_SCREEN[0], img_width=_ALE_SCREEN[1], **screen)
        self.stacked = None

    def reset(self, seed):
        if seed is None and self.stacked is None:
            seed = random.randrange(2**31)
        seeds = None if seed is None else np.array([seed % 2**31], np.int64)
        obs, _ = self.observer.reset(seed=seeds)
        screen, _ = self.camera.reset(seed=seeds)
        frame = self.shrink(obs[0, 0])
        self.stacked = np.repeat(frame[..., None], self.stack, axis=-1)
        return self.stacked.copy(), screen[0, 0]

    def step(self, action):
        actions = np.array([action], np.int64)
        obs, reward, terminated, truncated, _ = self.observer.step(actions)
        screen, screen_reward, screen_terminated, screen_truncated, _ = self.camera.step(actions)
        done = bool(terminated[0] or truncated[0])
        if reward[0] != screen_reward[0] or done != bool(screen_terminated[0] or screen_truncated[0]):
            raise RuntimeError("record_video: ale-py's two envs of the game went out of step; please report it")
        self.stacked[..., :-1] = self.stacked[..., 1:]
        self.stacked[..., -1] = self.shrink(obs[0, 0])
        return self.stacked.copy(), screen[0, 0], float(reward[0]), done

    def shrink(self, frame):
        return frame if self.crop is None else self.crop(frame)

    def close(self):
        self.observer.close()
        self.camera.close()


class _Crop:
    """`env_config.crop` as impala-gym's `CroppedFrames` applies it: the sides cut off ALE's
    screen, the rest area-averaged to `size` (OpenCV's INTER_AREA) and rounded."""

    def __init__(self, crop, size):
        top, bottom, left, right = (int(crop.get(side, 0)) for side in ("top", "bottom", "left", "right"))
        height, width = _ALE_SCREEN[0] - top - bottom, _ALE_SCREEN[1] - left - right
        self.rows, self.cols = slice(top, top + height), slice(left, left + width)
        self.row_weights = _area_weights(height, size[0])
        self.col_weights = _area_weights(width, size[1]).T

    def __call__(self, frame):
        small = self.row_weights @ frame[self.rows, self.cols].astype(np.float32) @ self.col_weights
        return np.rint(small).astype(np.uint8)


def _area_weights(size, out):
    """`[out, size]`: row `o` weighs each input pixel by how much of it lies in
    `[o * size / out, (o + 1) * size / out)`, the arithmetic of the worker's `area_weights`
    (the same float32 weights, so the same rounded pixels)."""
    scale = size / out
    begin = np.arange(out)[:, None] * scale
    pixel = np.arange(size)[None, :]
    covered = np.minimum(begin + scale, pixel + 1) - np.maximum(begin, pixel)
    return (np.clip(covered, 0, None) / scale).astype(np.float32)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m impala_rs.video",
        description="Record a checkpoint's policy playing its env: one MP4 per episode in DIR "
        "(episode-000-return-21.0.mp4), one JSON line per episode on stdout.",
    )
    parser.add_argument(
        "--checkpoint", required=True, metavar="PATH", help="a checkpoint folder, or a run folder (its newest)"
    )
    parser.add_argument("--video", required=True, metavar="DIR", help="the folder the MP4s are written to")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to record (default: 1)")
    parser.add_argument("--explore", action="store_true", help="sample actions instead of acting greedily")
    parser.add_argument("--seed", type=int, help="seed of the first episode's reset")
    parser.add_argument("--fps", type=float, help="frames per second (default: the env's)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="end each episode after N steps")
    args = parser.parse_args(argv)
    # Frames come from rgb_array renders, never a window: without this, pygame's SDL prints an
    # "error:" about a missing display on a headless machine.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        for episode in _record_checkpoint(
            args.checkpoint, args.video, args.episodes, args.explore, args.seed, args.fps, args.max_steps
        ):
            print(json.dumps(episode), flush=True)
    except (OSError, ImportError, ValueError, _impala_rs.ImpalaError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
