"""IMPALAConfig: RLlib's builder groups, dict access and validation with the CLI's messages."""

import warnings

import pytest

from impala_rs import ConfigError, IMPALAConfig


def test_groups_chain_and_to_dict_has_every_option():
    config = (
        IMPALAConfig()
        .environment("Acrobot-v1", env_config={"a": 1})
        .env_runners(num_env_runners=3, rollout_fragment_length=25)
        .training(lr=0.01, grad_clip=None, model={"fcnet_hiddens": [64]})
        .training(model={"fcnet_activation": "relu"})
        .learners(num_learners=0)
        .resources(num_cpus_for_main_process=1)
        .evaluation(evaluation_interval=2)
        .reporting(min_time_s_per_iteration=1)
        .fault_tolerance(restart_failed_env_runners=False)
        .debugging(seed=7, _env_runners_only=False)
    )
    d = config.to_dict()
    assert d["env"] == "Acrobot-v1" and d["env_config"] == {"a": 1}
    assert (d["num_env_runners"], d["rollout_fragment_length"], d["lr"]) == (3, 25, 0.01)
    assert d["grad_clip"] is None
    # `model` dicts merge, as RLlib's training(model=...) does.
    assert d["model"]["fcnet_hiddens"] == [64] and d["model"]["fcnet_activation"] == "relu"
    assert d["seed"] == 7 and d["evaluation_interval"] == 2
    # Defaults are RLlib's IMPALAConfig() ones, and every key is there.
    assert d["vtrace_clip_rho_threshold"] == 1.0 and "replay_proportion" in d
    config.validate()
    assert IMPALAConfig.from_dict(d).to_dict() == d
    assert config.lr == 0.01 and config["num_env_runners"] == 3


def test_aliases_and_rllib_old_names():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = IMPALAConfig().rollouts(num_workers=2).training(num_epochs=1)
    assert config.to_dict()["num_env_runners"] == 2
    assert config.to_dict()["num_sgd_iter"] == 1
    assert any("num_workers" in str(w.message) for w in caught)
    config.num_env_runners = 5
    assert config.num_env_runners == 5
    assert config.framework("torch") is config
    with pytest.raises(TypeError, match="libtorch"):
        config.framework("tf2")
    assert config.framework(precision="bf16-mixed").to_dict()["precision"] == "bf16-mixed"
    with pytest.raises(TypeError, match="nearest valid key is `precision`"):
        config.framework(precison="bf16-mixed")


def test_unknown_and_misplaced_options_raise_at_once():
    with pytest.raises(TypeError, match="nearest valid key is `lr`"):
        IMPALAConfig().training(lrr=0.1)
    with pytest.raises(TypeError, match=r"set by `env_runners\(\)`, not `training\(\)`"):
        IMPALAConfig().training(num_env_runners=2)
    with pytest.raises(TypeError, match="model.fcnet_hiddens"):
        IMPALAConfig().training(model={"fcnet_hidens": [1]})
    with pytest.raises(AttributeError, match="nearest is `gamma`"):
        IMPALAConfig().gama


def test_validate_lists_every_problem():
    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .training(gamma=1.5, entropy_coeff=-0.1, train_batch_size=0)
        .env_runners(rollout_fragment_length=0)
    )
    with pytest.raises(ConfigError) as info:
        config.validate()
    problems = info.value.problems
    assert len(problems) >= 4, problems
    text = str(info.value)
    for key in ["gamma", "entropy_coeff", "train_batch_size", "rollout_fragment_length"]:
        assert any(key in p for p in problems), (key, problems)
        assert key in text


def test_wrong_types_are_all_listed():
    config = IMPALAConfig().training(lr="fast", learner_queue_size=-3).env_runners(num_env_runners="two")
    with pytest.raises(ConfigError) as info:
        config.validate()
    problems = info.value.problems
    assert len(problems) == 3, problems
    assert any("`lr` expects a number" in p for p in problems)
    with pytest.raises(ConfigError):
        config.build()


def test_a_wrong_type_names_the_builder_method_that_sets_it():
    with pytest.raises(ConfigError) as info:
        IMPALAConfig().training(model={"fcnet_hiddens": "x"}).validate()
    assert str(info.value).startswith("training(): `model.fcnet_hiddens` expects a list"), info.value
    config = IMPALAConfig().training(lr="fast").env_runners(num_env_runners="two")
    with pytest.raises(ConfigError) as info:
        config.validate()
    assert sorted(p.split(":")[0] for p in info.value.problems) == ["env_runners()", "training()"]
    assert "set()" not in str(info.value)


def test_search_spaces_must_go_through_tune():
    from ray import tune

    config = IMPALAConfig().training(lr=tune.grid_search([0.1, 0.2]))
    with pytest.raises(ConfigError, match="search space") as info:
        config.validate()
    assert info.value.problems == ["`lr` is a Ray Tune search space (grid_search)"]


def test_stubs_match_the_key_registry():
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "generate_stubs.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
