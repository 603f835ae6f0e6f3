"""Exporting the trained policy (RLlib's ``export_policy_model`` / ``Policy.export_model``): a
TorchScript ``model.pt`` that plain PyTorch runs with impala_rs's outputs, the observation
filter folded in, recurrent state in and out; ONNX refused with the fix."""

import numpy as np
import pytest
import torch

from impala_rs import Policy

from conftest import fast_cartpole


def test_an_exported_policy_gives_impala_rs_outputs_in_plain_pytorch(tmp_path):
    config = fast_cartpole().environment("CartPole-v1", normalize_observations=True).debugging(seed=0)
    with config.build() as algo:
        algo.train()
        path = algo.export_policy_model(tmp_path / "export")
        # A snapshot to compare with: the run's env runners go on updating its filter.
        policy = algo.get_policy()
    assert path == str(tmp_path / "export" / "model.pt")
    assert [t.shape for t in torch.jit.load(path)(torch.zeros(3, 4))] == [(3, 2), (3,)]
    module = torch.jit.load(policy.export_model(tmp_path / "snapshot"))
    # Raw observations: the module normalises them with the run's saved filter.
    obs = np.random.default_rng(0).normal(scale=2.0, size=(6, 4)).astype(np.float32)
    _, _, info = policy.compute_actions(obs, explore=False)
    with torch.no_grad():
        logits, value = module(torch.from_numpy(obs))
    np.testing.assert_allclose(logits.numpy(), info["action_dist_inputs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value.numpy(), info["vf_preds"], rtol=1e-5, atol=1e-5)
    # Greedy actions from the logits are the policy's.
    actions, _, _ = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(logits.argmax(dim=1).numpy(), actions)


def test_a_recurrent_checkpoint_exports_its_state(tmp_path):
    config = fast_cartpole().training(model={"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8})
    with config.build() as algo:
        checkpoint = algo.save(tmp_path / "run")
    policy = Policy.from_checkpoint(checkpoint)
    module = torch.jit.load(policy.export_model(tmp_path / "export"))
    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    state = policy.get_initial_state()
    torch_state = torch.zeros(1, 16)
    for _ in range(3):
        _, state, info = policy.compute_single_action(obs, state=state, explore=False)
        with torch.no_grad():
            logits, value, torch_state = module(torch.from_numpy(obs)[None], torch_state)
        np.testing.assert_allclose(logits[0].numpy(), info["action_dist_inputs"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(torch_state[0].numpy(), state[0], rtol=1e-5, atol=1e-5)


def test_onnx_is_refused_with_the_fix(tmp_path):
    with fast_cartpole().build() as algo:
        with pytest.raises(ValueError, match="torch.onnx.export"):
            algo.export_policy_model(tmp_path, onnx=11)
