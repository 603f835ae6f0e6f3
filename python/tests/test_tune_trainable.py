"""The Ray Tune trainable outside a Tune run (Tune's checkpoint API by hand), and the package
without Ray."""

import subprocess
import sys
import warnings

import pytest
from conftest import fast_cartpole


def test_trainable_checkpoints_round_trip_through_tunes_api(tmp_path):
    from impala_rs.tune import Impala

    config = fast_cartpole().to_dict()
    first = Impala(config=config)
    try:
        assert first.train()["training_iteration"] == 1
        checkpoint = first.save(str(tmp_path / "tune_checkpoint"))
    finally:
        first.stop()
    second = Impala(config=config)
    # Nothing starts before the restore: the trial is built restored.
    assert second.algo is None
    try:
        second.restore(checkpoint)
        assert second.algo.iteration == 1
        assert second.train()["num_env_steps_sampled"] > 0
    finally:
        second.stop()


def test_a_bad_config_fails_when_the_trial_is_created():
    from impala_rs import ConfigError
    from impala_rs.tune import Impala

    config = fast_cartpole().training(lr=-1.0).to_dict()
    with pytest.raises(ConfigError, match="lr"):
        Impala(config=config)


def test_a_trials_config_warnings_come_once_from_its_build():
    from impala_rs.tune import Impala

    config = fast_cartpole().training(minibatch_buffer_size=2).to_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trial = Impala(config=config)
        try:
            assert not [w for w in caught if "minibatch_buffer_size" in str(w.message)]
            trial.train()
        finally:
            trial.stop()
    assert len([w for w in caught if "minibatch_buffer_size" in str(w.message)]) == 1


def test_resource_request_is_the_configs_placement_group():
    from impala_rs.tune import Impala

    config = fast_cartpole().env_runners(num_env_runners=2).to_dict()
    request = Impala.default_resource_request(config)
    assert request.bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]


def test_the_package_imports_without_ray():
    script = (
        "import sys; sys.modules['ray'] = None\n"
        "import impala_rs\n"
        "try:\n"
        "    import impala_rs.tune\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'pip install "ray[tune]"' in done.stdout, done.stdout


def test_a_registered_creator_reaches_tune_trials(tmp_path):
    from ray import tune

    from impala_rs import register_env
    from impala_rs.tune import Impala

    def make_cartpole(env_config):
        import gymnasium as gym

        return gym.make("CartPole-v1", max_episode_steps=env_config["limit"])

    register_env("short_cartpole", make_cartpole)
    # One fragment at least (4 envs x 50 steps), so every env ends an episode of at most 50
    # steps within the one iteration, however slowly the worker processes start.
    config = (
        fast_cartpole()
        .environment("short_cartpole", env_config={"limit": 50})
        .reporting(min_sample_timesteps_per_iteration=200)
    )
    results = tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path)),
    ).fit()
    assert results.errors == []
    (result,) = list(results)
    assert 0 < result.metrics["episode_len_mean"] <= 50
