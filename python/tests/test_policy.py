"""Using the trained policy: a checkpoint's greedy policy in a plain Gymnasium loop acts as
the evaluation runners act, weights by parameter name, corrupt checkpoints refused, recurrent
state in and out, and an algorithm's actions from its learner's current weights."""

import time

import gymnasium as gym
import numpy as np
import pytest

from impala_rs import DEFAULT_POLICY_ID, ImpalaError, Policy, evaluate_checkpoint, register_env

from conftest import fast_cartpole

SEED = 0
#: Evaluation's single local runner seeds its env's first reset `seed + 1_000_000` (and resets
#: unseeded after), as `impala evaluate` does.
EVALUATION_SEED_OFFSET = 1_000_000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A CartPole checkpoint trained for an iteration on Gymnasium's CartPole, normalising
    observations (so the saved filter matters)."""
    config = fast_cartpole().environment(
        "CartPole-v1", env_backend="gymnasium", normalize_observations=True
    ).debugging(seed=SEED)
    with config.build() as algo:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("run"))


def test_greedy_actions_in_a_gymnasium_loop_score_what_evaluation_scores(checkpoint):
    policy = Policy.from_checkpoint(checkpoint)
    env = gym.make("CartPole-v1")
    episodes, returns, lengths = 3, [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=SEED + EVALUATION_SEED_OFFSET if episode == 0 else None)
        total, steps, done = 0.0, 0, False
        while not done:
            action, state_out, info = policy.compute_single_action(obs, explore=False)
            assert action == np.argmax(info["action_dist_inputs"]) and state_out == []
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, steps, done = total + reward, steps + 1, terminated or truncated
        returns.append(total)
        lengths.append(steps)
    evaluation = evaluate_checkpoint(checkpoint, episodes=episodes, explore=False)
    assert evaluation["episode_return_mean"] == pytest.approx(np.mean(returns), abs=0, rel=1e-12)
    assert evaluation["episode_len_mean"] == pytest.approx(np.mean(lengths), abs=0, rel=1e-12)


def test_batches_act_as_single_observations(checkpoint):
    policy = Policy.from_checkpoint(checkpoint)
    batch = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    actions, state_outs, info = policy.compute_actions(batch, explore=False)
    assert actions.dtype == np.int64 and actions.shape == (5,) and state_outs == []
    assert info["action_dist_inputs"].shape == (5, 2) and info["vf_preds"].shape == (5,)
    for row, action in zip(batch, actions):
        assert policy.compute_single_action(list(row), explore=False)[0] == action


def test_weights_round_trip_by_name_and_a_mismatch_names_the_parameter(checkpoint):
    policy = Policy.from_checkpoint(checkpoint)
    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    before = policy.compute_single_action(obs, explore=False)[2]["action_dist_inputs"]
    weights = policy.get_weights()
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in weights.values())
    policy.set_weights({name: value * 0 for name, value in weights.items()})
    zeroed = policy.compute_single_action(obs, explore=False)[2]["action_dist_inputs"]
    assert not np.any(zeroed)
    policy.set_weights(weights)
    after = policy.compute_single_action(obs, explore=False)[2]["action_dist_inputs"]
    np.testing.assert_array_equal(after, before)

    name = sorted(weights)[0]
    missing = dict(weights)
    del missing[name]
    with pytest.raises(ImpalaError, match=f"weight `{name}` is missing"):
        policy.set_weights(missing)
    with pytest.raises(ImpalaError, match=f"weight `{name}` has shape"):
        policy.set_weights({**weights, name: weights[name][..., None]})
    with pytest.raises(ImpalaError, match="weight `extra` is no parameter of the model"):
        policy.set_weights({**weights, "extra": np.zeros(1)})
    for key, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, weights[key])


def test_a_corrupt_checkpoint_is_refused(checkpoint, tmp_path):
    import shutil
    from pathlib import Path

    damaged = tmp_path / "checkpoint_000001"
    shutil.copytree(checkpoint, damaged)
    model = damaged / "learner" / "model.safetensors"
    data = bytearray(model.read_bytes())
    data[-1] ^= 0x10
    model.write_bytes(bytes(data))
    with pytest.raises(ImpalaError, match="corrupt checkpoint.*load another checkpoint"):
        Policy.from_checkpoint(damaged)
    assert Path(checkpoint).is_dir()


def test_recurrent_state_goes_in_and_comes_out():
    config = fast_cartpole().training(model={"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8})
    with config.build() as algo:
        policy = algo.get_policy()
        assert policy.is_recurrent()
        state = policy.get_initial_state()
        assert [s.shape for s in state] == [(16,)]
        obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
        action, state_out, info = algo.compute_single_action(obs, state=state, explore=False)
        assert action in (0, 1) and state_out[0].shape == (16,) and np.any(state_out[0])
        _, next_state, _ = algo.compute_single_action(obs, state=state_out, explore=False)
        assert not np.array_equal(next_state[0], state_out[0])
        # RLlib's LSTM state is `[h, c]`: the same values in two arrays act the same.
        h_c = [state_out[0][:8], state_out[0][8:]]
        _, split_next, _ = algo.compute_single_action(obs, state=h_c, explore=False)
        np.testing.assert_array_equal(split_next[0], next_state[0])
        # Without a state the algorithm returns the action alone (RLlib's semantics).
        assert algo.compute_single_action(obs, explore=False) == action
        actions, outs, _ = algo.compute_actions(
            [obs, obs], state_batches=[np.stack([state[0], state_out[0]])], explore=False
        )
        assert actions.shape == (2,)
        np.testing.assert_allclose(outs[0], np.stack([state_out[0], next_state[0]]), atol=1e-6)
        with pytest.raises(ImpalaError, match="state holds 3 values"):
            policy.compute_single_action(obs, state=[np.zeros(3)])


def test_an_algorithm_acts_with_its_learners_current_weights():
    with fast_cartpole().build() as algo:
        weights = algo.get_weights()
        assert list(weights) == [DEFAULT_POLICY_ID]
        policy = algo.get_policy()
        for name, value in policy.get_weights().items():
            np.testing.assert_array_equal(value, weights[DEFAULT_POLICY_ID][name])
        # set_weights reaches the learner (no batch reaches it before train()); a mismatch
        # names the parameter and changes nothing.
        zeroed = {name: np.zeros_like(value) for name, value in weights[DEFAULT_POLICY_ID].items()}
        algo.set_weights({DEFAULT_POLICY_ID: zeroed})
        assert all(not np.any(v) for v in algo.get_weights()[DEFAULT_POLICY_ID].values())
        name = sorted(zeroed)[-1]
        with pytest.raises(ImpalaError, match=f"weight `{name}` has shape"):
            algo.set_weights({DEFAULT_POLICY_ID: {**zeroed, name: np.zeros(3)}})
        with pytest.raises(KeyError, match="default_policy"):
            algo.set_weights({"other": zeroed})
        algo.set_weights(weights)
        algo.train()
        trained = algo.get_weights()[DEFAULT_POLICY_ID]
        assert any(not np.array_equal(trained[n], weights[DEFAULT_POLICY_ID][n]) for n in trained)
        obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
        # The algorithm's actions follow the learner; the snapshot taken before training does not.
        # The learner goes on with its queued train batches after train() returns (as RLlib's
        # learner thread does), so the two reads are compared once no update fell between them.
        for _ in range(200):
            before = algo.get_weights()[DEFAULT_POLICY_ID]
            logits = algo.compute_actions([obs], state_batches=[], explore=False)[2]["action_dist_inputs"]
            fresh = algo.get_policy().compute_single_action(obs, explore=False)[2]["action_dist_inputs"]
            after = algo.get_weights()[DEFAULT_POLICY_ID]
            if all(np.array_equal(before[n], after[n]) for n in before):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the learner was still updating 10 s after train() returned")
        np.testing.assert_array_equal(logits[0], fresh)
        with pytest.raises(KeyError, match="default_policy"):
            algo.get_policy("other")


class Push(gym.Env):
    """A point pushed by a force in [-1, 1] toward 0; observations are its position and
    velocity."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.x = np.zeros(2, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.x.copy(), {}

    def step(self, action):
        force = float(np.clip(action[0], -1, 1))
        self.x = np.clip(self.x + np.array([self.x[1], force], np.float32) * 0.1, -10, 10)
        return self.x.copy(), -abs(float(self.x[0])), False, False, {}


def test_a_registered_env_checkpoint_loads_and_clips_box_actions(tmp_path):
    def make_push(env_config):
        return Push()

    register_env("push", make_push)
    config = (
        fast_cartpole()
        .environment("push", env_config={"max_episode_steps": 20}, clip_actions=True, normalize_actions=False)
        .env_runners(num_envs_per_env_runner=2)
    )
    with config.build() as algo:
        algo.train()
        checkpoint = algo.save(tmp_path)
    policy = Policy.from_checkpoint(checkpoint)
    assert policy.action_space["type"] == "Box"
    obs = np.random.default_rng(1).uniform(-1, 1, (200, 2)).astype(np.float32)
    actions, _, info = policy.compute_actions(obs, explore=True)
    assert actions.shape == (200, 1) and actions.dtype == np.float32
    assert np.all(np.abs(actions) <= 1.0)
    # Greedy: the Gaussian's mean, clipped.
    greedy, _, info = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(greedy[:, 0], np.clip(info["action_dist_inputs"][:, 0], -1, 1))


def test_box_actions_are_what_the_env_runners_send_normalised_by_default():
    """RLlib's ``normalize_actions`` (on by default): the policy acts in [-1, 1] and its
    actions reach Pendulum's [-2, 2] torque mapped and clipped; without it they come as sampled."""
    obs = np.array([1.0, 0.0, 0.0], np.float32)

    def actions(**environment):
        config = fast_cartpole().environment("Pendulum-v1", **environment)
        with config.build() as algo:
            policy = algo.get_policy()
            return np.array([policy.compute_single_action(obs, explore=True)[0][0] for _ in range(300)])

    normalised = actions()
    assert normalised.min() >= -2.0 and normalised.max() <= 2.0
    # A unit-scale Gaussian in [-1, 1] space: about a third of the torques at a bound.
    assert 40 < np.sum(np.abs(normalised) == 2.0) < 200
    raw = actions(normalize_actions=False)
    assert np.sum(np.abs(raw) > 2.0) > 10 and np.sum(np.abs(raw) == 2.0) == 0
