"""Multi-agent training from Python with RLlib's ``multi_agent()``: a coordination game learned
with a policy per agent mapped by a ``policy_mapping_fn``, per-policy results, weights and
actions, a policy left out of ``policies_to_train`` unchanged, checkpoints restored whole or
per policy, and the refusals."""

import numpy as np
import pytest

import impala_rs
from impala_rs import ConfigError, IMPALAConfig, ImpalaError

from coordination import Coordination
from signaling import Signaling


def half_observed():
    """HalfObserved (two agents, `left` and `right`, each seeing one bit; both rewarded when
    their actions' parity is the bits' parity; 10 steps) as it learns fast here."""
    return (
        IMPALAConfig()
        .environment("HalfObserved")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8, rollout_fragment_length=10)
        .training(train_batch_size=80, lr=0.003, entropy_coeff=0.003, model={"fcnet_hiddens": [16]})
        .reporting(min_time_s_per_iteration=0.25, metrics_num_episodes_for_smoothing=50)
        .debugging(seed=3)
    )


def reached(result, target):
    """Whether every policy's mean reward is at least `target` (None before any episode)."""
    means = result["policy_reward_mean"].values()
    return all(m is not None and m >= target for m in means)


def test_a_policy_per_agent_learns_to_coordinate(tmp_path):
    config = half_observed().multi_agent(
        policies={"left", "right"},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id,
        count_steps_by="agent_steps",
    )
    with config.build_algo() as algo:
        assert algo.policy_ids == ["left", "right"]
        for _ in range(120):
            result = algo.train()
            if reached(result, 9.5):
                break
        assert reached(result, 9.5), result["policy_reward_mean"]
        assert set(result["info"]["learner"]) == {"left", "right"}
        assert result["env_runners"]["module_episode_returns_mean"]["right"] >= 9.5
        assert result["timesteps_total"] == result["num_agent_steps_sampled"]
        # Greedy, the two policies share a convention (both play their bit, or both flip it).
        act = {
            (policy, bit): algo.compute_single_action(bit, policy_id=policy, explore=False)
            for policy in ("left", "right")
            for bit in (0, 1)
        }
        for left in (0, 1):
            for right in (0, 1):
                assert act["left", left] ^ act["right", right] == left ^ right, act
        weights = algo.get_weights()
        assert set(weights) == {"left", "right"}
        assert not np.array_equal(weights["left"]["logits.weight"], weights["right"]["logits.weight"])
        evaluation = algo.evaluate()["env_runners"]
        assert evaluation["policy_reward_mean"] == {"left": 10.0, "right": 10.0}
        checkpoint = algo.save(tmp_path)
    # A fresh run takes back one policy, or all of them.
    with config.build_algo() as fresh:
        fresh.restore(checkpoint, policy_ids=["left"])
        assert fresh.iteration == 0
        left = fresh.get_weights(["left"])["left"]["logits.weight"]
        fresh.restore(checkpoint)
        assert fresh.iteration == result["training_iteration"]
        # Nothing trains before train(): both restores hold the checkpoint's weights.
        np.testing.assert_array_equal(fresh.get_weights(["left"])["left"]["logits.weight"], left)
        with pytest.raises(KeyError, match="no policy 'middle'"):
            fresh.get_policy("middle")


def test_a_policy_not_to_train_keeps_its_weights():
    config = half_observed().multi_agent(
        policies=["left", "right"],
        policy_mapping_fn={"left": "left", "right": "right"},
        policies_to_train=lambda policy_id, batch: policy_id == "left",
    )
    with config.build_algo() as algo:
        before = algo.get_weights()
        for _ in range(3):
            result = algo.train()
        after = algo.get_weights()
    assert "right" not in result["info"]["learner"]
    for name, value in before["right"].items():
        np.testing.assert_array_equal(after["right"][name], value)
    assert not np.array_equal(after["left"]["logits.weight"], before["left"]["logits.weight"])


def test_a_policy_spec_config_sets_that_policys_network_and_options():
    class PolicySpec:
        policy_class = observation_space = action_space = None

        def __init__(self, config):
            self.config = config

    config = half_observed().multi_agent(
        policies={"left": None, "right": PolicySpec({"lr": 1e-4, "model": {"fcnet_hiddens": [32]}})},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id,
    )
    assert config.to_dict()["policy_config"] == {"right": {"lr": 1e-4, "model": {"fcnet_hiddens": [32]}}}
    with config.build_algo() as algo:
        weights = algo.get_weights()
    assert weights["left"]["torso.fc0.weight"].shape == (16, 2)
    assert weights["right"]["torso.fc0.weight"].shape == (32, 2)


def test_multi_agent_mistakes_are_refused_naming_the_agent_and_the_policy():
    class Spec:
        observation_space = "Box(4)"

    with pytest.raises(TypeError, match="spec of 'left' sets"):
        half_observed().multi_agent(policies={"left": Spec(), "right": None})
    with pytest.raises(TypeError, match="policy_mapping_fn"):
        half_observed().multi_agent(policy_mapping_fn=3)
    with pytest.raises(ConfigError, match="single-agent env"):
        IMPALAConfig().multi_agent(policy_mapping_fn=lambda agent_id, episode: "p").validate()
    config = half_observed().multi_agent(
        policies=["left", "right"], policy_mapping_fn=lambda agent_id, episode: "left"
    )
    with pytest.raises(ImpalaError, match="no agent of the env maps to policy `right`"):
        config.build_algo()
    config = half_observed().multi_agent(policy_mapping_fn={"left": "nobody"})
    with pytest.raises(ImpalaError, match="maps `left` to policy `nobody`"):
        config.build_algo()
    with pytest.raises(ImpalaError, match="does not apply to a multi-agent env"):
        half_observed().environment(clip_rewards=1.0).build_algo()


def test_a_registered_pettingzoo_env_trains_with_per_policy_results():
    # The env is built here once to read its agent ids for the mapping function, then in the
    # env workers; results come per policy.
    impala_rs.register_env("coordination", lambda config: Coordination(config))
    config = (
        half_observed()
        .environment("coordination", env_config={"length": 10})
        .env_runners(num_envs_per_env_worker=8)
        .multi_agent(
            policies=["left", "right"],
            policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id,
        )
    )
    assert config._native_dict()["policy_mapping"] == {"left": "left", "right": "right"}
    with config.build_algo() as algo:
        result = algo.train()
        while result["info"]["learner"].get("right", {}).get("num_grad_updates_lifetime", 0) < 3:
            result = algo.train()
    assert set(result["info"]["learner"]) == {"left", "right"}
    assert set(result["policy_reward_mean"]) == {"left", "right"}
    assert result["num_agent_steps_sampled"] == 2 * result["num_env_steps_sampled"]


def test_independent_learners_settle_on_a_signal_in_an_rllib_multi_agent_env():
    # Agents of different observation spaces, a policy each; docs/LEARNING.md has why lr 1e-4.
    impala_rs.register_env("signaling", lambda config: Signaling(config))
    config = (
        IMPALAConfig()
        .environment("signaling")
        .env_runners(
            num_env_runners=1,
            num_envs_per_env_runner=16,
            num_envs_per_env_worker=16,
            rollout_fragment_length=20,
        )
        .training(train_batch_size=640, lr=0.0001, entropy_coeff=0.01)
        .reporting(min_time_s_per_iteration=1.0, metrics_num_episodes_for_smoothing=100)
        .debugging(seed=1)
    )
    mapped = config.multi_agent(
        policies={"speaker", "listener"},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id,
    )
    with mapped.build_algo() as algo:
        for _ in range(240):
            result = algo.train()
            if reached(result, 8.0):
                break
    assert reached(result, 8.0), result["policy_reward_mean"]
    # One policy cannot act for agents that see different spaces.
    shared = config.multi_agent(
        policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kwargs: "shared"
    )
    with pytest.raises(ImpalaError, match="agent `listener` maps to policy shared"):
        shared.build_algo()


def test_a_multi_agent_config_runs_as_a_tune_trial(tmp_path):
    from ray import tune

    from impala_rs.tune import Impala

    config = half_observed().multi_agent(
        policies=["left", "right"], policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id
    )
    results = tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path)),
    ).fit()
    assert results.errors == []
    (result,) = list(results)
    assert set(result.metrics["policy_reward_mean"]) == {"left", "right"}
    assert set(result.metrics["info"]["learner"]) == {"left", "right"}
