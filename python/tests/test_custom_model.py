"""Users' torch models (RLlib's custom models): registered by name or passed as a class, built
with RLlib's constructor arguments and custom_model_config as keyword arguments, scripted with
TorchScript and trained by the Rust learner; clear errors for modules TorchScript cannot
compile and for unknown names."""

import json
import subprocess
import time
from typing import Tuple

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from impala_rs import (
    ConfigError,
    Impala,
    IMPALAConfig,
    ImpalaError,
    register_custom_model,
    registered_models,
)
from impala_rs import models

from conftest import tuned_cartpole


@pytest.fixture(autouse=True)
def model_cache(tmp_path, monkeypatch):
    """Scripted models go to a cache folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


class Mlp(nn.Module):
    """Two tanh layers for the policy and a value network of its own: its parameters' names
    start with `value`, so `_separate_vf_optimizer` trains them with `_lr_vf`."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, hidden=64):
        super().__init__()
        size = int(np.prod(obs_space.shape))
        self.policy = nn.Sequential(
            nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, num_outputs)
        )
        self.value = nn.Sequential(nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            self.policy[-1].weight.mul_(0.01)

    def forward(self, obs: Tensor) -> Tuple[Tensor, Tensor]:
        obs = obs.flatten(1)
        return self.policy(obs), self.value(obs).squeeze(1)


#: What `Recording` was built with, one entry per build.
BUILT = []


class Recording(Mlp):
    """An Mlp that records its constructor's arguments."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, **kwargs):
        BUILT.append(dict(obs_space=obs_space, action_space=action_space, num_outputs=num_outputs,
                          model_config=model_config, name=name, kwargs=kwargs))
        super().__init__(obs_space, action_space, num_outputs, model_config, name, hidden=kwargs.get("hidden", 64))


class NotScriptable(Mlp):
    def forward(self, obs: Tensor) -> Tuple[Tensor, Tensor]:
        hidden = {**{"obs": obs}}["obs"]  # dict unpacking: not in TorchScript's Python
        return self.policy(hidden), self.value(hidden).squeeze(1)


def test_a_registered_model_trains_cartpole():
    register_custom_model("test_mlp", Mlp)
    config = tuned_cartpole().training(model={"custom_model": "test_mlp", "custom_model_config": {"hidden": 64}})
    start = time.monotonic()
    best = 0.0
    with config.build() as algo:
        # The catalog's MLP with these settings reaches 450 in about 2 s; 150 within 45 s
        # leaves room for a busy machine.
        while time.monotonic() - start < 45:
            result = algo.train()
            best = max(best, result["episode_return_mean"])
            if best >= 150:
                break
        # What the user wrote stays in the algorithm's config.
        assert algo.config.to_dict()["model"]["custom_model"] == "test_mlp"
    assert best >= 150, (best, result["training_iteration"], time.monotonic() - start)


def test_a_class_is_built_with_rllibs_arguments_and_custom_model_config_as_keywords():
    BUILT.clear()
    config = (
        tuned_cartpole()
        .training(model={"custom_model": Recording, "custom_model_config": {"hidden": 16, "tag": "x"}, "framestack": 3})
    )
    with config.build() as algo:
        assert algo.train()["training_iteration"] == 1
        assert algo.config.to_dict()["model"]["custom_model"] is Recording
    (built,) = BUILT
    # The env's spaces after the run's wrappers: framestack 3 stacks CartPole's 4 values.
    assert isinstance(built["obs_space"], gym.spaces.Box) and built["obs_space"].shape == (3, 4)
    assert built["action_space"] == gym.spaces.Discrete(2)
    assert built["num_outputs"] == 2
    assert built["name"] == "default_model"
    assert built["kwargs"] == {"hidden": 16, "tag": "x"}
    # model_config is the whole model dict, defaults included, as RLlib passes it.
    assert built["model_config"]["custom_model_config"] == {"hidden": 16, "tag": "x"}
    assert built["model_config"]["framestack"] == 3 and "fcnet_hiddens" in built["model_config"]


def test_a_checkpoint_of_a_class_model_restores_and_evaluates_with_the_cli(tmp_path, impala_bin):
    config = tuned_cartpole().training(model={"custom_model": Mlp})
    with config.build() as algo:
        algo.train()
        path = algo.save(tmp_path)
    # The scripted file the checkpoint names outlives the algorithm, and building from the
    # same class names the same file.
    with config.build() as again:
        again.restore(path)
        assert again.iteration == 1
    restored = Impala.from_checkpoint(path)
    try:
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()
    done = subprocess.run(
        [impala_bin, "evaluate", "--checkpoint", path, "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["num_episodes"] == 2


def test_a_module_torchscript_cannot_compile_is_one_clear_error():
    with pytest.raises(ImpalaError) as info:
        tuned_cartpole().training(model={"custom_model": NotScriptable}).build()
    text = str(info.value)
    assert "model.custom_model NotScriptable: torch.jit.script failed" in text, text
    # TorchScript's own message, with the offending line.
    assert 'hidden = {**{"obs": obs}}["obs"]' in text, text
    assert "test_custom_model.py" in text, text


def test_an_unknown_name_lists_the_registered_models():
    register_custom_model("test_listed", Mlp)
    config = tuned_cartpole().training(model={"custom_model": "test_lsted"})
    with pytest.raises(ConfigError) as info:
        config.validate()
    text = str(info.value)
    assert "'test_lsted'" in text and "'test_listed'" in text, text
    assert "did you mean 'test_listed'?" in text, text
    assert "register_custom_model('test_lsted', cls)" in text, text
    assert info.value.problems and "test_lsted" in info.value.problems[0]
    with pytest.raises(ConfigError, match="test_lsted"):
        config.build()
    assert "test_listed" in registered_models()


def test_builtin_names_and_files_go_to_the_core_as_written(tmp_path):
    resnet = IMPALAConfig().training(model={"custom_model": "impala_resnet", "custom_model_config": {"hidden": 32}})
    assert resnet._python_models() == {}
    assert resnet._native_dict()["model"]["custom_model"] == "impala_resnet"
    file = tmp_path / "mlp.pt"
    torch.jit.script(Mlp(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), 2, {}, "m")).save(str(file))
    scripted = IMPALAConfig().training(model={"custom_model": str(file)})
    scripted.validate()
    assert scripted._native_dict()["model"]["custom_model"] == str(file)
    # A class is left out of the core's config: the algorithm scripts it.
    native = IMPALAConfig().training(model={"custom_model": Mlp, "custom_model_config": {"hidden": 8}})._native_dict()
    assert (native["model"]["custom_model"], native["model"]["custom_model_config"]) == (None, {})


class NoKeywords(Mlp):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)


def cartpole_spec():
    low = [-4.8, -3.4e38, -0.42, -3.4e38]
    return {
        "observation_space": {"type": "Box", "low": low, "high": [-x for x in low], "shape": [4]},
        "action_space": {"type": "Discrete", "n": 2},
        "max_episode_steps": 500,
    }


def test_a_class_without_keyword_arguments_is_built_without_them_as_rllib_does():
    model = {"custom_model": NoKeywords, "custom_model_config": {"hidden": 8}}
    with pytest.warns(UserWarning, match="should accept all custom options"):
        path = models.script_model("NoKeywords", NoKeywords, cartpole_spec(), model)
    weights = dict(torch.jit.load(path).named_parameters())
    assert weights["policy.0.weight"].shape == (64, 4)


def test_a_gymnasium_envs_discrete_observations_arrive_one_hot():
    BUILT.clear()
    config = (
        IMPALAConfig()
        .environment("FrozenLake-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=10)
        .training(train_batch_size=40, model={"custom_model": Recording})
        .reporting(min_time_s_per_iteration=0.2)
    )
    with config.build() as algo:
        assert algo.train()["num_env_steps_sampled"] > 0
    (built,) = BUILT
    # RLlib's preprocessed space: a one-hot Box, the env's space as its original_space.
    assert built["obs_space"].shape == (16,) and built["obs_space"].original_space == gym.spaces.Discrete(16)
    assert built["num_outputs"] == 4


def test_box_actions_have_a_mean_and_a_log_std_per_dimension():
    BUILT.clear()
    spec = cartpole_spec()
    spec["action_space"] = {"type": "Box", "low": [-1.0] * 3, "high": [1.0] * 3, "shape": [3]}
    models.script_model("Recording", Recording, spec, {"custom_model": Recording})
    (built,) = BUILT
    assert built["action_space"] == gym.spaces.Box(-1.0, 1.0, (3,))
    assert built["num_outputs"] == 6


def test_without_torch_the_error_says_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install torch==2\.11\.0"):
        models.script_model("Mlp", Mlp, cartpole_spec(), {"custom_model": Mlp})
