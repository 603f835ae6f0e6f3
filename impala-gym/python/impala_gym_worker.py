"""The env worker process of impala-gym: steps Gymnasium envs for one Rust env runner.

Started by `impala-gym` as `python -c <this file> <setup json>`; not a public module.

Protocol (see impala-gym/src/worker.rs, which is the other side):
- stdout is the reply pipe (the user's prints go to stderr); stdin carries commands.
- Start-up: this process prints one JSON line: the envs' spaces, or the error that stopped it
  (with the last frame of the traceback). Then it reads one JSON line naming the shared-memory
  file and prints `{"ready": true}`.
- Then fixed-size binary frames only. A command is 16 bytes (op, flag, slot, pad, value):
  op b"R" resets slot `slot` (seeded with `value` when flag is 1); b"M" steps the slots
  `slot + i` for each bit i set in `value` with the actions the runner wrote into shared memory
  (one command for all of a worker's envs, so one wake-up and one reply write per step); b"Q"
  quits. A reply is 16 bytes (status, flags, slot, message
  length, reward): status b"O" ok (with `record_infos`, the env's infos of that length
  follow: see `info_payload`), b"E" failed (an UTF-8 message of that length follows),
  b"X" failed and recreated (restart_failed_sub_environments); flags bit 0 terminated, bit 1
  truncated, bit 2 reset: the step ended the episode and the env was reset at once
  (Gymnasium's same-step autoreset, unseeded as the runner's own reset after an episode would
  be), its final observation is in the slot's final row and the next episode's first in its
  observation row, so the runner's reset needs no round trip. Observations go into shared
  memory as float32, or as bytes for a uint8 Box observation space (the runner's
  `Space::Bytes`); actions as float32.
- Multi-agent envs (PettingZoo `ParallelEnv`s, AEC envs through PettingZoo's
  `aec_to_parallel`, and envs written to RLlib's `MultiAgentEnv` API) are detected when the
  first env is built; the start-up line then lists `agents` with their spaces, and every
  (env, agent) pair is a slot: env `e`'s agent `i` is slot `e * K + i` (K agents). `R` resets
  the env of its slot, `M` steps each env of its slots once with the actions of those slots
  (the agents that act), and both reply once for every agent slot of the env: flags bit 0
  terminated, bit 1 truncated, bit 4 observed (its observation row was written), bit 5 all
  terminated, bit 6 all truncated (RLlib's `"__all__"`).
- The worker exits when stdin closes without `Q` (the runner went away) or when its parent
  process dies, even inside a hung env step (a watchdog thread checks the parent's pid); it
  then kills its process group. The runner starts it in a process group of its own (whose id
  is the worker's pid), which the runner kills when the worker stops or dies, so processes the
  envs fork go with it. It ignores SIGINT (a Ctrl-C meant for the trainer; the trainer stops it).
"""

import importlib
import json
import mmap
import os
import signal
import struct
import sys
import traceback

COMMAND = struct.Struct("<cBHIQ")
# The variables that size numerical libraries' thread pools, set before numpy is imported.
NUMERICAL_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
REPLY = struct.Struct("<cBHId")
# The length of an info payload's first part (see `info_payload`).
INFO_SPLIT = struct.Struct("<I")


def pickled_info(info):
    """`info` pickled for the driver's episode callbacks (`get_infos()`), or b"" for an empty
    one; values that cannot be pickled go as their `repr`."""
    if not info:
        return b""
    import pickle

    try:
        return pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an info must never fail the env's step
        safe = {}
        for key, value in info.items():
            try:
                pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                safe[key] = value
            except Exception:  # noqa: BLE001
                safe[key] = repr(value)
        return pickle.dumps(safe, protocol=pickle.HIGHEST_PROTOCOL)


def info_payload(info, reset_info=None):
    """What an ok reply carries with `record_infos`: the 4-byte length of the step's (or
    reset's) pickled info, that info, then the pickled info of the reset that followed in the
    same step (same-step autoreset); b"" when both are empty."""
    first, second = pickled_info(info), pickled_info(reset_info)
    if not first and not second:
        return b""
    return INFO_SPLIT.pack(len(first)) + first + second


def ok_reply(flags, slot, reward, payload=b""):
    return REPLY.pack(b"O", flags, slot, len(payload), reward) + payload


def orphaned():
    """Exit because the runner is gone: with the processes the envs forked, since this worker
    leads a process group (the runner kills the group itself when it stops a worker)."""
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)  # the group: this worker and what its envs forked
    os._exit(1)


def exit_with_parent(parent_pid):
    """Exit as soon as the process that started this one is gone (even if it was SIGKILLed and
    this process is stuck inside an env step): a watchdog thread checks the parent's pid."""
    import threading
    import time

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        orphaned()

    if os.getppid() != parent_pid:
        orphaned()
    threading.Thread(target=watch, name="impala-parent-watchdog", daemon=True).start()


def last_frame(exc):
    """`Type: message (file:line in function)` for the innermost frame of `exc`."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        f = frames[-1]
        where = f" (at {f.filename}:{f.lineno} in {f.name})"
    text = f"{type(exc).__name__}: {exc}".strip()
    return (text + where).replace("\n", " ")


def load_entry_point(spec):
    """`package.module:Name` -> the object, imported from the user's path."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    target = module
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def describe(space, np, spaces, flatten, observation):
    """A space as JSON for the Rust side; `flatten` marks Dict/Tuple flattened to a Box. A uint8
    Box observation space is `bytes`: its values travel as bytes, never as floats."""
    if isinstance(space, spaces.Discrete):
        return {"kind": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        if np.any(space.start != 0):
            raise ValueError(f"MultiDiscrete with a non-zero start is not supported: {space}")
        return {"kind": "multi_discrete", "nvec": [int(n) for n in np.ravel(space.nvec)]}
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "multi_discrete", "nvec": [2] * int(np.prod(space.shape))}
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        if observation and dtype == np.uint8:
            return {"kind": "bytes", "shape": [int(d) for d in space.shape], "flattened": flatten}
        low = np.broadcast_to(space.low, space.shape).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).astype(np.float64)
        return {
            "kind": "box",
            "shape": [int(d) for d in space.shape],
            "low": [json_float(x) for x in np.ravel(low)],
            "high": [json_float(x) for x in np.ravel(high)],
            "dtype": str(dtype),
            "flattened": flatten,
        }
    raise TypeError(f"unsupported space {space!r}")


def json_float(x):
    """JSON has no infinities: unbounded Box bounds travel as the strings "inf" and "-inf"."""
    x = float(x)
    if x == float("inf"):
        return "inf"
    if x == float("-inf"):
        return "-inf"
    return x


class ObsWriter:
    """Writes observations of `space` into shared-memory rows (float32, or uint8 for a uint8
    Box: the element type the runner names when it maps the rows)."""

    def __init__(self, space, np, spaces):
        self.np = np
        self.spaces = spaces
        self.space = space
        # Dict and Tuple observations are flattened (to float32, or to bytes if all are uint8).
        self.flat_space = None
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            self.flat_space = spaces.flatten_space(space)

    def space_json(self):
        np, spaces = self.np, self.spaces
        if self.flat_space is not None:
            return describe(self.flat_space, np, spaces, True, True)
        return describe(self.space, np, spaces, False, True)

    def bind(self, rows):
        """Returns `write(obs, slot)`, which writes into `rows` (`[count, obs_dim]` in shared
        memory), the fastest way for this space: this runs once per env step."""
        if self.flat_space is not None:
            space, flatten = self.space, self.spaces.flatten

            def write(obs, slot):
                rows[slot] = flatten(space, obs)

        elif isinstance(self.space, self.spaces.Discrete):
            start = int(self.space.start)

            def write(obs, slot):
                rows[slot, 0] = int(obs) - start

        else:
            # A view with the space's shape: numpy copies (and casts) without a reshape.
            view = rows.reshape((rows.shape[0],) + tuple(self.space.shape))

            def write(obs, slot):
                view[slot] = obs

        return write


class ActionReader:
    """Turns a float32 shared-memory row into an action of `space` (Box actions are clipped)."""

    def __init__(self, space, np, spaces):
        self.np = np
        self.space = space
        if isinstance(space, spaces.Discrete):
            self.kind, self.start = "discrete", int(space.start)
        elif isinstance(space, spaces.MultiDiscrete):
            self.kind = "multi_discrete"
        elif isinstance(space, spaces.MultiBinary):
            self.kind = "multi_binary"
        elif isinstance(space, spaces.Box):
            self.kind = "box"
            self.low = np.broadcast_to(space.low, space.shape)
            self.high = np.broadcast_to(space.high, space.shape)
        else:
            raise TypeError(f"unsupported action space {space!r}")

    def bind(self, rows):
        """Returns `read(slots)`: the actions of `slots` from `rows` (`[count, action_dim]`
        in shared memory), the fastest way for this space: this runs once per command."""
        if self.kind == "discrete":
            column, start = rows[:, 0], self.start

            def read(slots):
                values = column.tolist()
                return [int(values[slot]) + start for slot in slots]

        else:

            def read(slots):
                return [self.read_row(rows[slot]) for slot in slots]

        return read

    def read_row(self, row):
        np = self.np
        if self.kind == "multi_discrete":
            return row.astype(np.int64).reshape(self.space.shape)
        if self.kind == "multi_binary":
            return row.astype(np.int8).reshape(self.space.shape)
        action = np.clip(row.reshape(self.space.shape), self.low, self.high)
        return action.astype(self.space.dtype)


class Envs:
    """`count` Gymnasium envs stepped one command at a time."""

    def __init__(self, setup, np, gym):
        self.np, self.gym, self.setup = np, gym, setup
        self.envs = [self.make() for _ in range(setup["count"])]
        # Multi-agent envs have per-agent spaces instead (see MultiAgentEnvs).
        self.observation_space = getattr(self.envs[0], "observation_space", None)
        self.action_space = getattr(self.envs[0], "action_space", None)
        spec = getattr(self.envs[0], "spec", None)
        self.max_episode_steps = getattr(spec, "max_episode_steps", None) if spec else None

    def make(self):
        setup, gym = self.setup, self.gym
        kwargs = dict(setup.get("env_config") or {})
        target = setup["env"]
        if setup.get("creator"):
            import pickle

            # The creating process's sys.path first, so what it imports by reference imports
            # here too; then the creator.
            with open(setup["creator"], "rb") as f:
                for path in pickle.load(f):
                    if path not in sys.path:
                        sys.path.append(path)
                creator = pickle.load(f)
            return self.call(creator, kwargs, f"the env creator registered as {target!r}")
        if ":" in target and not target.startswith("ALE/"):
            return self.call(load_entry_point(target), kwargs, target)
        return gym.make(target, **kwargs)

    def call(self, creator, kwargs, what):
        """An env from a `gymnasium.Env` subclass (keywords) or a creator (RLlib's one
        `env_config` dict, or keywords), with `max_episode_steps` as a time limit."""
        gym = self.gym
        if isinstance(creator, type) and issubclass(creator, gym.Env):
            env = creator(**kwargs) if kwargs else creator()
        elif callable(creator):
            env = creator(kwargs) if _takes_config(creator) else creator(**kwargs)
        else:
            raise TypeError(f"{what} is neither a gymnasium.Env subclass nor a callable")
        limit = kwargs.get("max_episode_steps")
        if limit:
            env = gym.wrappers.TimeLimit(env, int(limit))
        return env

    def reset(self, slot, seed):
        """The first observation of a new episode, and its info."""
        return self.envs[slot].reset(seed=seed)

    def recreate(self, slot):
        try:
            self.envs[slot].close()
        except Exception:
            pass
        self.envs[slot] = self.make()


def _takes_config(creator):
    """RLlib's env creators take one `env_config` dict; classes take keyword arguments."""
    import inspect

    try:
        params = list(inspect.signature(creator).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1 and not any(p.kind == p.VAR_KEYWORD for p in params)


def flat_width(space_json, np):
    """Values one element of a described space takes in a shared-memory row."""
    if space_json["kind"] == "discrete":
        return 1
    if space_json["kind"] == "multi_discrete":
        return len(space_json["nvec"])
    return max(1, int(np.prod(space_json["shape"])))


def is_multi_agent(env):
    """Whether `env` follows a multi-agent API: PettingZoo's (parallel or AEC), or RLlib's
    `MultiAgentEnv` (agent ids from `possible_agents` or `get_agent_ids`)."""
    return hasattr(env, "possible_agents") or callable(getattr(env, "get_agent_ids", None))


class MultiAgentEnvs:
    """The multi-agent envs of a worker, each agent a slot (see the module docstring)."""

    def __init__(self, envs, np, spaces):
        self.np, self.spaces = np, spaces
        self.envs = [self.parallel(env) for env in envs.envs]
        first = self.envs[0]
        agents = getattr(first, "possible_agents", None)
        if agents is None:
            agents = sorted(first.get_agent_ids())
        self.agents = list(agents)
        if not self.agents:
            raise ValueError("the multi-agent env lists no agents (possible_agents is empty)")
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        self.observation_spaces = [self.space(first, "observation", a) for a in self.agents]
        self.action_spaces = [self.space(first, "action", a) for a in self.agents]
        self.max_episode_steps = None
        # Whether replies carry each agent's info (the worker's `record_infos`).
        self.record_infos = False

    @staticmethod
    def parallel(env):
        """PettingZoo AEC envs step through PettingZoo's own `aec_to_parallel`."""
        try:
            from pettingzoo.utils.env import AECEnv
        except ImportError:
            return env
        if isinstance(env, AECEnv):
            from pettingzoo.utils.conversions import aec_to_parallel

            return aec_to_parallel(env)
        return env

    def space(self, env, kind, agent):
        """Agent `agent`'s `kind` space: PettingZoo's `observation_space(agent)`, RLlib's
        `observation_spaces[agent]`, or a `Dict` space keyed by agent."""
        attr = getattr(env, f"{kind}_space", None)
        if callable(attr) and not isinstance(attr, self.spaces.Space):
            return attr(agent)
        per_agent = getattr(env, f"{kind}_spaces", None)
        if isinstance(per_agent, dict) and agent in per_agent:
            return per_agent[agent]
        if isinstance(attr, self.spaces.Dict) and agent in attr.spaces:
            return attr.spaces[agent]
        raise TypeError(f"the multi-agent env has no {kind} space for agent {agent!r}")

    def describe(self):
        np, spaces = self.np, self.spaces
        return [
            {
                "id": str(agent),
                "observation_space": ObsWriter(obs, np, spaces).space_json(),
                "action_space": describe(act, np, spaces, False, False),
            }
            for agent, obs, act in zip(self.agents, self.observation_spaces, self.action_spaces)
        ]

    def bind(self, obs_rows, act_rows):
        """Per agent, `write(obs, slot)` and `read(slot)` over its first columns of the rows
        (the rows are as wide as the widest agent's)."""
        np, spaces = self.np, self.spaces
        self.writers, self.readers = [], []
        for obs_space, act_space in zip(self.observation_spaces, self.action_spaces):
            writer = ObsWriter(obs_space, np, spaces)
            width = flat_width(writer.space_json(), np)
            if width == obs_rows.shape[1] or writer.flat_space is not None or len(obs_space.shape or ()) < 2:
                self.writers.append(writer.bind(obs_rows[:, :width]))
            else:
                # A narrower agent's image-shaped observation, flattened into its columns.
                def write(obs, slot, rows=obs_rows, width=width):
                    rows[slot, :width] = np.asarray(obs).reshape(-1)

                self.writers.append(write)
            act_width = flat_width(describe(act_space, np, spaces, False, False), np)
            read = ActionReader(act_space, np, spaces).bind(act_rows[:, :act_width])
            self.readers.append(lambda slot, read=read: read((slot,))[0])

    def reset(self, e, seed):
        """Resets env `e`; returns its replies (one per agent slot)."""
        obs, infos = self.envs[e].reset(seed=seed)
        return self.replies(e, obs, {}, {}, {}, None, infos)

    def step(self, e, slots):
        """Steps env `e` with the actions of `slots` (its acting agents); its replies."""
        k = len(self.agents)
        actions = {self.agents[slot - e * k]: self.readers[slot - e * k](slot) for slot in slots}
        env = self.envs[e]
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        return self.replies(e, obs, rewards, terminateds, truncateds, env, infos)

    def replies(self, e, obs, rewards, terminateds, truncateds, env, infos):
        k = len(self.agents)
        if "__all__" in terminateds or "__all__" in truncateds:
            all_term = bool(terminateds.get("__all__", False))
            all_trunc = bool(truncateds.get("__all__", False)) and not all_term
        elif env is not None and hasattr(env, "agents") and not env.agents:
            # PettingZoo: the episode is over once no agent is left.
            all_trunc = any(truncateds.values()) and not all(terminateds.values())
            all_term = not all_trunc
        else:
            all_term = all_trunc = False
        out = []
        for agent, i in self.index.items():
            slot = e * k + i
            flags = 0
            if agent in obs:
                self.writers[i](obs[agent], slot)
                flags |= 16
            if terminateds.get(agent, False):
                flags |= 1
            elif truncateds.get(agent, False):
                flags |= 2
            flags |= (32 if all_term else 0) | (64 if all_trunc else 0)
            payload = info_payload(infos.get(agent)) if self.record_infos and infos else b""
            out.append(ok_reply(flags, slot, float(rewards.get(agent, 0.0)), payload))
        return out


# ALE's screen, `[height, width]`, for every game.
ALE_SCREEN = (210, 160)


class AleStackedFrames:
    """Observations as ale-py's vector env stacks them (`[stack, H, W]` of the whole screen,
    resized), turned into the `[H, W, stack]` the CNN wants."""

    def __init__(self, np, count, vec):
        self.np = np
        self.stack, h, w = vec.single_observation_space.shape
        self.shape = (h, w, self.stack)
        # Steps since each env's game was reset: the first `stack - 1` observations of a game
        # hold frames from before it, which AtariVectorEnv leaves zero; they repeat the first
        # frame instead, as Gymnasium's FrameStackObservation and RLlib's FrameStack do.
        self.since_reset = np.zeros(count, dtype=np.int64)

    def reset(self, raw):
        """Every env's observation at the start of its game."""
        self.since_reset[:] = 0
        return [self.hwc(raw[i], i) for i in range(len(raw))]

    def step(self, raw, final, ended):
        """Every env's observation one step on, and `{env: last observation}` of the games that
        `ended` (whose envs `raw` already shows in their next game, `final` in the last)."""
        self.since_reset += 1
        last = {}
        for i in self.np.flatnonzero(ended):
            last[i] = self.hwc(final[i], i)
            self.since_reset[i] = 0
        return [self.hwc(raw[i], i) for i in range(len(raw))], last

    def hwc(self, obs, i):
        missing = self.stack - 1 - self.since_reset[i]
        if missing > 0 and not obs[:missing].any():
            obs = obs.copy()
            obs[:missing] = obs[missing]
        return self.np.moveaxis(obs, 0, -1)


class CroppedFrames:
    """Observations cropped from ale-py's full screen (`env_config.crop`), area-averaged to
    `img_height x img_width` and stacked here as `[H, W, stack]`.

    ale-py's vector env can only resize the whole screen. Cropping a game to where it is
    played (Pong without its score and borders) keeps the rows of the playing field at a
    higher resolution and drops pixels that change with no action. The vector env is asked
    for unstacked full-size frames; the frames from before a game repeat its first.
    """

    SIDES = ("top", "bottom", "left", "right")

    def __init__(self, np, count, vec, crop, size, stack):
        self.np = np
        unknown = sorted(set(crop) - set(self.SIDES))
        if unknown:
            raise ValueError(f"env_config.crop: unknown side(s) {unknown}; use {list(self.SIDES)}")
        top, bottom, left, right = (int(crop.get(side, 0)) for side in self.SIDES)
        screen_h, screen_w = vec.single_observation_space.shape[-2:]
        height, width = screen_h - top - bottom, screen_w - left - right
        if min(top, bottom, left, right) < 0 or height < 1 or width < 1:
            raise ValueError(
                f"env_config.crop {crop} leaves no pixels of the {screen_h}x{screen_w} screen"
            )
        self.rows, self.cols = slice(top, top + height), slice(left, left + width)
        self.row_weights = area_weights(np, height, size[0])
        self.col_weights = area_weights(np, width, size[1]).T
        self.stacks = np.zeros((count, size[0], size[1], stack), np.uint8)
        self.shape = self.stacks.shape[1:]

    def shrink(self, raw):
        """Frames (`[envs, 1, H, W]` of the full screen) cropped and resized."""
        frames = raw[:, 0, self.rows, self.cols].astype(self.np.float32)
        small = self.row_weights @ frames @ self.col_weights
        return self.np.rint(small).astype(self.np.uint8)

    def reset(self, raw):
        self.stacks[:] = self.shrink(raw)[..., None]
        return self.stacks.copy()

    def step(self, raw, final, ended):
        frames = self.shrink(raw)
        self.stacks[..., :-1] = self.stacks[..., 1:]
        self.stacks[..., -1] = frames
        last = {}
        ended = self.np.flatnonzero(ended)
        if len(ended):
            for i, frame in zip(ended, self.shrink(final[ended])):
                last[i] = self.stacks[i].copy()
                last[i][..., -1] = frame
                self.stacks[i] = frames[i][..., None]
        return self.stacks.copy(), last


def area_weights(np, size, out):
    """`[out, size]` weights that average `size` pixels into `out` (OpenCV's INTER_AREA):
    output pixel `o` covers input span `[o * size / out, (o + 1) * size / out)`."""
    scale = size / out
    starts = np.arange(out)[:, None] * scale
    pixels = np.arange(size)[None, :]
    overlap = np.minimum(starts + scale, pixels + 1) - np.maximum(starts, pixels)
    return (np.clip(overlap, 0, None) / scale).astype(np.float32)


class AtariEnvs:
    """`count` Atari games in one ale-py `AtariVectorEnv`, stepped all together.

    The runner steps every env of a worker in lock-step, so steps are gathered until every slot
    asked; the vector env resets finished envs in the same step (their reset observation is
    answered on the runner's next reset of that slot).
    """

    # ale-py's int seeds are 32-bit: larger ones (a restarted runner's, or a configured seed's
    # streams) are reduced modulo 2^31.
    SEED_RANGE = 2**31

    def __init__(self, setup, np, gym):
        import ale_py

        self.np = np
        self.count = setup["count"]
        kwargs = dict(setup.get("env_config") or {})
        # ale-py's own `episodic_life` resets the whole game at a life lost, so only first lives
        # would ever be played. Here a life lost ends the episode for learning while the game
        # goes on (DeepMind's and RLlib's EpisodicLifeEnv), and returns stay the game's.
        self.episodic_life = bool(kwargs.pop("episodic_life", False))
        crop = kwargs.pop("crop", None)
        if crop is not None:
            if not kwargs.get("grayscale", True):
                raise ValueError("env_config.crop needs grayscale frames; remove `grayscale`")
            size = (kwargs.pop("img_height", 84), kwargs.pop("img_width", 84))
            stack = kwargs.pop("stack_num", 4)
            # Full-size single frames: the crop, the resize and the stack happen here.
            kwargs.update(img_height=ALE_SCREEN[0], img_width=ALE_SCREEN[1], stack_num=1)
        game = setup["env"].split("/", 1)[1].split("-", 1)[0]
        game = "".join("_" + c.lower() if c.isupper() else c for c in game).lstrip("_")
        kwargs.setdefault("autoreset_mode", "SameStep")
        # Rewards are clipped by the runner (`clip_rewards`), so episode returns stay unclipped.
        kwargs.setdefault("reward_clipping", False)
        self.vec = ale_py.AtariVectorEnv(game, num_envs=self.count, **kwargs)
        if crop is None:
            self.frames = AleStackedFrames(np, self.count, self.vec)
        else:
            self.frames = CroppedFrames(np, self.count, self.vec, crop, size, stack)
        self.observation_space = gym.spaces.Box(0, 255, self.frames.shape, np.uint8)
        self.action_space = self.vec.single_action_space
        self.max_episode_steps = None
        self.lives = np.zeros(self.count, dtype=np.int64)
        self.actions = np.zeros(self.count, dtype=np.int64)
        self.pending_steps = set()
        self.reset_obs = {}

    def reset(self, slot, seed):
        """A new game's first observation for `slot` and its info: the vector env resets every
        game at once, so the other slots' come from that reset when they ask."""
        if slot in self.reset_obs:
            return self.reset_obs.pop(slot)
        np = self.np
        seeds = None
        if seed is not None:
            seeds = np.array([(seed + i) % self.SEED_RANGE for i in range(self.count)], np.int64)
        obs, info = self.vec.reset(seed=seeds)
        self.lives[:] = info["lives"]
        starts = self.frames.reset(obs)
        self.reset_obs = {
            i: (starts[i], env_info(info, i)) for i in range(self.count) if i != slot
        }
        return starts[slot], env_info(info, slot)

    def gather_step(self, slot, action):
        """Records `slot`'s action; returns True once every slot has one."""
        self.actions[slot] = action
        self.pending_steps.add(slot)
        return len(self.pending_steps) == self.count

    def step_all(self):
        """Steps every slot: `(obs, final_obs or None, reward, terminated, truncated,
        continues)` per slot. An ended game's env is already reset (`obs` is the next game's
        first observation); with `episodic_life`, a life lost ends the episode (`terminated`,
        `continues`: the game goes on, so `final_obs` and `obs` are the same frames)."""
        self.pending_steps.clear()
        obs, rewards, terms, truncs, info = self.vec.step(self.actions)
        ended = terms | truncs
        final = info.get("final_obs")
        frames, last = self.frames.step(obs, obs if final is None else final, ended)
        lives = info["lives"]
        results = []
        for i in range(self.count):
            if ended[i]:
                term, trunc = bool(terms[i]), bool(truncs[i])
                results.append((frames[i], last[i], float(rewards[i]), term, trunc, False))
            else:
                lost = self.episodic_life and lives[i] < self.lives[i]
                now = frames[i]
                results.append((now, now if lost else None, float(rewards[i]), lost, False, lost))
            self.lives[i] = lives[i]
        return results, info

    def infos(self, info, i, ended):
        """Slot `i`'s info of the step `info` came from, and of the reset that followed in it
        (None where the game goes on). ale-py's vector env reports the next game's info at the
        step that ends a game, so that step's own info is empty."""
        if not ended:
            return env_info(info, i), None
        return {}, env_info(info, i)

    def recreate(self, slot):
        raise RuntimeError("an Atari vector env cannot recreate one of its envs")


def env_info(info, i):
    """Env `i`'s info out of a vector env's (a dict of arrays, with `_key` masks)."""
    out = {}
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = info.get("_" + key)
        if mask is not None and not mask[i]:
            continue
        out[key] = value[i].item() if hasattr(value[i], "item") else value[i]
    return out


class Commands:
    """Reads command bytes from the runner's pipe, spinning briefly before it blocks.

    Waking a blocked process costs tens of microseconds here, about as long as stepping a few
    envs, so after each command this worker polls the (non-blocking) pipe for a while before it
    sleeps. The spin adapts as a glibc adaptive mutex does: it doubles (up to `MAX_SPIN_S`)
    whenever a command came during the spin and halves (down to `MIN_SPIN_S`) whenever none
    did, so a worker whose runner is busy elsewhere (inference, the learner sharing the cores)
    soon spins little.
    """

    MIN_SPIN_S = 0.00002
    MAX_SPIN_S = 0.0002

    def __init__(self, fd, spin):
        """`spin`: whether to spin at all (the runner's `GymSettings::spin`: only when every
        busy thread has a core of its own)."""
        import select
        import time

        self.fd, self.select, self.clock = fd, select.select, time.perf_counter
        self.min_spin = self.MIN_SPIN_S if spin else 0.0
        self.max_spin = self.MAX_SPIN_S if spin else 0.0
        self.spin = self.min_spin
        os.set_blocking(fd, False)

    def read(self):
        """The next bytes from the runner (b"" once it closed the pipe)."""
        fd, clock = self.fd, self.clock
        try:
            return os.read(fd, 1 << 16)
        except BlockingIOError:
            pass
        until = clock() + self.spin
        while clock() < until:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            self.spin = min(self.spin * 2, self.max_spin)
            return chunk
        self.spin = max(self.spin / 2, self.min_spin)
        while True:
            self.select([fd], [], [])
            try:
                return os.read(fd, 1 << 16)
            except BlockingIOError:
                continue


def frames(commands):
    """The runner's commands `(op, has_seed, slot, value)`, one at a time, until it quits (`Q`).
    A pipe closed without `Q` means the runner is gone: see `orphaned`."""
    pending = b""
    while True:
        chunk = commands.read()
        if not chunk:
            orphaned()
        pending += chunk
        while len(pending) >= COMMAND.size:
            op, has_seed, slot, _, value = COMMAND.unpack_from(pending)
            pending = pending[COMMAND.size :]
            if op == b"Q":
                return
            yield op, has_seed, slot, value


def mask_slots(base, mask):
    """The slots `base + i` for the bits i set in `mask`, lowest first."""
    slots = []
    while mask:
        low = mask & -mask
        slots.append(base + low.bit_length() - 1)
        mask ^= low
    return slots


def failure(status, slot, message):
    return REPLY.pack(status, 0, slot, len(message), 0.0) + message


def main():
    # A SIGINT meant for the trainer (this worker leads a process group of its own, so a
    # terminal's Ctrl-C no longer reaches it, but a `kill -INT` of a tree may): the runner
    # stops this worker, so it ignores SIGINT instead of dying as a failed env mid-step.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Env workers run side by side, several per core: a thread pool of the numerical libraries
    # (OpenBLAS, MKL, OpenMP) in each would spin against the others' and the learner's. Ray
    # gives its workers one thread the same way; a value the user exported wins.
    for var in NUMERICAL_THREAD_VARS:
        os.environ.setdefault(var, "1")
    setup = json.loads(sys.argv[1])
    exit_with_parent(setup["parent_pid"])
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the user's prints must not reach the reply pipe
    sys.stdout = sys.stderr
    for path in reversed(setup.get("sys_path", [])):
        if path not in sys.path:
            sys.path.insert(0, path)

    def hello(message):
        replies.write((json.dumps(message) + "\n").encode())

    try:
        import numpy as np
        import gymnasium as gym
        from gymnasium import spaces

        if setup["env"].startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
        atari = setup.get("atari_vector", False)
        envs = (AtariEnvs if atari else Envs)(setup, np, gym)
        if not atari and is_multi_agent(envs.envs[0]):
            envs = MultiAgentEnvs(envs, np, spaces)
            envs.record_infos = setup.get("record_infos", False)
            hello({"agents": envs.describe(), "max_episode_steps": None})
        else:
            writer = ObsWriter(envs.observation_space, np, spaces)
            reader = ActionReader(envs.action_space, np, spaces)
            hello(
                {
                    "observation_space": writer.space_json(),
                    "action_space": describe(envs.action_space, np, spaces, False, False),
                    "max_episode_steps": envs.max_episode_steps,
                }
            )
    except BaseException as exc:  # noqa: BLE001 - everything must reach the runner
        hello({"error": last_frame(exc)})
        return 1
    atari = isinstance(envs, AtariEnvs)
    multi = isinstance(envs, MultiAgentEnvs)

    line = sys.stdin.buffer.readline()
    if not line:
        orphaned()
    shm = json.loads(line)
    count, obs_dim, act_dim = setup["count"], shm["obs_dim"], shm["action_dim"]
    if multi:
        count *= len(envs.agents)
    with open(shm["path"], "r+b") as f:
        region = mmap.mmap(f.fileno(), shm["size"])
    obs_rows = np.ndarray((count, obs_dim), np.dtype(shm["obs_dtype"]), buffer=region, offset=0)
    final_rows = np.ndarray(
        (count, obs_dim), np.dtype(shm["obs_dtype"]), buffer=region, offset=shm["final_offset"]
    )
    act_rows = np.ndarray(
        (count, act_dim), np.float32, buffer=region, offset=shm["action_offset"]
    )
    if multi:
        envs.bind(obs_rows, act_rows)
        hello({"ready": True})
        commands = Commands(sys.stdin.buffer.raw.fileno(), setup.get("spin", False))
        return serve_multi_agent(envs, commands, replies)
    write = writer.bind(obs_rows)
    write_final = writer.bind(final_rows)
    read = reader.bind(act_rows)
    hello({"ready": True})

    restart_sub_envs = setup.get("restart_failed_sub_environments", False)
    record_infos = setup.get("record_infos", False)
    infos = info_payload if record_infos else (lambda info, reset_info=None: b"")
    commands = Commands(sys.stdin.buffer.raw.fileno(), setup.get("spin", False))
    for op, has_seed, slot, seed in frames(commands):
        # Each command's replies go out as soon as it is done (one write), not after the
        # other commands read with it: the runner infers for these envs while this worker
        # steps the next command's.
        out = []
        if op == b"R":
            slots, actions = (slot,), (None,)
        elif op == b"M":
            slots = mask_slots(slot, seed)
            actions = read(slots)
        else:
            slots, actions = (), ()
            out.append(failure(b"E", slot, f"unknown command {op!r}".encode()))
        for slot, action in zip(slots, actions):
            try:
                if op == b"R":
                    first, info = envs.reset(slot, int(seed) if has_seed else None)
                    write(first, slot)
                    out.append(ok_reply(0, slot, 0.0, infos(info)))
                    continue
                if atari:
                    if envs.gather_step(slot, action):
                        steps, info = envs.step_all()
                        for i, step in enumerate(steps):
                            obs, last, reward, term, trunc, continues = step
                            write(obs, i)
                            flags = term | (trunc << 1) | (continues << 3)
                            if last is not None:
                                write_final(last, i)
                                flags |= 4
                            payload = b""
                            if record_infos:
                                ended = (term or trunc) and not continues
                                step_info, reset_info = envs.infos(info, i, ended)
                                payload = info_payload(
                                    step_info, step_info if continues else reset_info
                                )
                            out.append(ok_reply(flags, i, reward, payload))
                    continue
                env = envs.envs[slot]
                obs, reward, term, trunc, info = env.step(action)
                if term or trunc:
                    flags = (1 if term else 0) | (2 if trunc else 0)
                    try:
                        first, reset_info = env.reset()
                    except Exception:  # noqa: BLE001 - the runner's own reset reports it
                        write(obs, slot)
                        reset_info = None
                    else:
                        write_final(obs, slot)
                        write(first, slot)
                        flags |= 4
                    out.append(ok_reply(flags, slot, float(reward), infos(info, reset_info)))
                    continue
                write(obs, slot)
                out.append(ok_reply(0, slot, float(reward), infos(info)))
            except Exception as exc:  # noqa: BLE001 - a failing env is reported, not fatal
                message = last_frame(exc).encode("utf-8", "replace")
                status = b"E"
                if restart_sub_envs:
                    try:
                        envs.recreate(slot)
                        status = b"X"
                    except Exception as again:  # noqa: BLE001
                        message += b"; recreating it failed too: " + last_frame(
                            again
                        ).encode("utf-8", "replace")
                out.append(failure(status, slot, message))
        if out:
            replies.write(b"".join(out))
    return 0


def serve_multi_agent(envs, commands, replies):
    """The command loop of multi-agent envs (see the module docstring): each command's replies,
    one per agent slot of every env it reset or stepped, go out in one write."""
    k = len(envs.agents)
    for op, has_seed, slot, seed in frames(commands):
        if op == b"R":
            by_env = {slot // k: None}
        elif op == b"M":
            by_env = {}
            for s in mask_slots(slot, seed):
                by_env.setdefault(s // k, []).append(s)
        else:
            replies.write(failure(b"E", slot, f"unknown command {op!r}".encode()))
            continue
        out = []
        for e, slots in by_env.items():
            try:
                if op == b"R":
                    out.extend(envs.reset(e, int(seed) if has_seed else None))
                else:
                    out.extend(envs.step(e, slots))
            except Exception as exc:  # noqa: BLE001 - a failing env is reported, not fatal
                message = last_frame(exc).encode("utf-8", "replace")
                out.extend(failure(b"E", e * k + i, message) for i in range(k))
        if out:
            replies.write(b"".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
