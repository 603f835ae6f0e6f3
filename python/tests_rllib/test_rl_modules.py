"""Users' own RLModule classes (RLlib's new API stack) trained by the Rust learner."""

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from impala_rs import IMPALAConfig, ImpalaError

from modules import BrokenForward, NoValues, TwoTowers


def cartpole(spec):
    return (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(lr=0.0005, vf_loss_coeff=0.05, entropy_coeff=0.0, train_batch_size_per_learner=500, grad_clip=40.0)
        .rl_module(rl_module_spec=spec)
        .debugging(seed=0)
        .reporting(min_time_s_per_iteration=1)
    )


def same_weights(policy, module):
    """``policy`` with ``module``'s weights: the learner goes on training between the calls
    that fetch each, and the module's weights keep their names under ``net.module.``."""
    trained = policy.get_weights()
    mine = {"net.module." + name: p.detach().numpy() for name, p in module.named_parameters()}
    assert sorted(mine) == sorted(trained)
    policy.set_weights(mine)
    return policy


def test_a_users_rl_module_trains_and_get_module_computes_what_the_policy_computes():
    config = cartpole(RLModuleSpec(module_class=TwoTowers, model_config={"hidden": 64}))
    spec = config.get_default_rl_module_spec()
    assert spec.module_class is TwoTowers and spec.model_config == {"hidden": 64}
    algo = config.build_algo()
    try:
        returns = [algo.train()["env_runners"]["episode_return_mean"] for _ in range(8)]
        # A random CartPole policy returns about 22; the module learns within seconds.
        assert max(r for r in returns if r is not None) > 100, returns
        module = algo.get_module()
        assert isinstance(module, TwoTowers)
        obs = torch.randn(6, 4)
        _, _, info = same_weights(algo.get_policy(), module).compute_actions(obs.numpy(), explore=False)
        with torch.no_grad():
            logits = module.forward_inference({"obs": obs})["action_dist_inputs"].numpy()
            values = module.compute_values({"obs": obs}).numpy()
        np.testing.assert_allclose(logits, info["action_dist_inputs"], atol=1e-5)
        np.testing.assert_allclose(values, info["vf_preds"], atol=1e-5)
        # The trained weights are the module's own names under `net.module.`.
        assert "net.module._pi.0.weight" in algo.get_weights()["default_policy"]
    finally:
        algo.stop()


def test_a_modules_model_config_comes_from_rl_module_model_config_when_its_spec_has_none():
    config = IMPALAConfig().rl_module(rl_module_spec=RLModuleSpec(module_class=TwoTowers), model_config={"hidden": 8})
    model = config.to_dict()["model"]
    assert model["custom_model"] is TwoTowers and model["custom_model_config"] == {"hidden": 8}


def test_a_module_that_cannot_be_trained_is_refused_at_build_with_the_reason_and_the_line():
    with pytest.raises(ImpalaError, match="no compute_values"):
        cartpole(RLModuleSpec(module_class=NoValues)).build_algo()
    with pytest.raises(ImpalaError, match=r"modules\.py:\d+: .*shape"):
        cartpole(RLModuleSpec(module_class=BrokenForward)).build_algo()
    with pytest.raises(TypeError, match="expects an RLModule subclass"):
        IMPALAConfig().rl_module(rl_module_spec=RLModuleSpec(module_class=torch.nn.Linear))


def test_rllibs_lstm_module_trains_as_a_recurrent_model():
    """RLlib's own example module with an LSTM (``lstm_containing_rlm.py``): its state dict
    is the core's recurrent state, stepped one observation at a time."""
    from ray.rllib.examples.rl_modules.classes.lstm_containing_rlm import LSTMContainingRLModule

    config = cartpole(
        RLModuleSpec(module_class=LSTMContainingRLModule, model_config={"lstm_cell_size": 16, "dense_layers": [16]})
        # The iteration lasts until one train batch is trained, however long the first
        # recurrent step takes on a loaded machine (0.5 s alone left it untrained once).
    ).reporting(min_time_s_per_iteration=0.5, min_train_timesteps_per_iteration=500)
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["num_env_steps_trained"] > 0
        module = algo.get_module()
        policy = same_weights(algo.get_policy(), module)
        assert policy.is_recurrent()
        assert isinstance(module, LSTMContainingRLModule)
        # One step from the initial state: the module's own forward (RLlib's [B, T, ...]
        # layout and state dict) gives the policy's logits.
        obs = torch.randn(3, 4)
        state = {k: torch.as_tensor(v)[None].repeat(3, 1) for k, v in module.get_initial_state().items()}
        with torch.no_grad():
            out = module.forward_inference({"obs": obs[:, None], "state_in": state})
        initial = [np.repeat(s[None], 3, axis=0) for s in policy.get_initial_state()]
        _, _, info = policy.compute_actions(obs.numpy(), initial, explore=False)
        np.testing.assert_allclose(out["action_dist_inputs"][:, 0].numpy(), info["action_dist_inputs"], atol=1e-5)
    finally:
        algo.stop()


def test_a_multi_agent_run_trains_a_module_class_per_policy_and_checkpoints_keep_them(tmp_path):
    """``MultiRLModuleSpec``: policy ``p0`` a module class of its own, ``p1`` another size of
    it, on RLlib's ``MultiAgentCartPole``; each trains, ``get_module`` gives each one's class,
    and a checkpoint keeps each module in its policy's learner folder and builds again from
    it alone."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole
    from ray.tune.registry import register_env

    from impala_rs import Impala

    register_env("multi_cart_modules", lambda cfg: MultiAgentCartPole(config=cfg))
    specs = {
        "p0": RLModuleSpec(module_class=TwoTowers, model_config={"hidden": 64}),
        "p1": RLModuleSpec(module_class=TwoTowers, model_config={"hidden": 32}),
    }
    config = (
        cartpole(MultiRLModuleSpec(rl_module_specs=specs))
        .environment("multi_cart_modules", env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda agent_id, episode, **kw: f"p{agent_id}")
    )
    algo = config.build_algo()
    try:
        start = time.monotonic()
        while True:
            result = algo.train()
            means = result["env_runners"].get("module_episode_returns_mean", {})
            means = [mean for mean in means.values() if mean is not None]
            if len(means) == 2 and min(means) >= 100:
                break
            assert time.monotonic() - start < 240, f"not at 100 per policy: {result['env_runners']}"
        obs = np.random.default_rng(0).uniform(-0.1, 0.1, (5, 4)).astype(np.float32)
        for policy_id, hidden in (("p0", 64), ("p1", 32)):
            module = algo.get_module(policy_id)
            assert isinstance(module, TwoTowers) and module._pi[0].out_features == hidden
            policy = same_weights(algo.get_policy(policy_id), module)
            with torch.no_grad():
                logits = module.forward_inference({"obs": torch.from_numpy(obs)})["action_dist_inputs"]
            _, _, info = policy.compute_actions(obs, explore=False)
            np.testing.assert_allclose(logits.numpy(), info["action_dist_inputs"], atol=1e-5)
        checkpoint = algo.save(tmp_path)
        weights = algo.get_weights()
    finally:
        algo.stop()
    learner = Path(checkpoint) / "learner"
    assert (learner / "p0" / "custom_model.pt").is_file() and (learner / "p1" / "custom_model.pt").is_file()
    restored = Impala.from_checkpoint(checkpoint)
    try:
        again = restored.get_weights()
        for policy_id in ("p0", "p1"):
            for name, value in weights[policy_id].items():
                np.testing.assert_array_equal(again[policy_id][name], value)
        # It trains on from there, with the modules the checkpoint holds.
        assert restored.train()["training_iteration"] == result["training_iteration"] + 1
    finally:
        restored.stop()
