"""RLlib's callbacks: the algorithm's hooks on the driver, metrics logged into the result, errors
that name the hook, and the env-runner hooks that are not replayed refused by name (the episode
hooks: test_episode_callbacks.py)."""

import pytest
from conftest import fast_cartpole

from impala_rs import RLlibCallback


class Recording(RLlibCallback):
    """Notes every hook it sees, adds to the result and logs a metric."""

    calls = []

    def on_algorithm_init(self, *, algorithm, metrics_logger=None, **kwargs):
        Recording.calls.append("init")

    def on_train_result(self, *, algorithm, metrics_logger=None, result, **kwargs):
        Recording.calls.append("train")
        result["custom"] = {"iteration_seen": result["training_iteration"]}
        metrics_logger.log_value("my_mean", 2.0)
        metrics_logger.log_value("my_mean", 4.0)
        metrics_logger.log_value(("nested", "last"), result["training_iteration"], reduce=None)

    def on_evaluate_start(self, *, algorithm, metrics_logger=None, **kwargs):
        Recording.calls.append("evaluate_start")

    def on_evaluate_end(self, *, algorithm, metrics_logger=None, evaluation_metrics, **kwargs):
        Recording.calls.append(("evaluate_end", evaluation_metrics["env_runners"]["num_episodes"] > 0))

    def on_checkpoint_loaded(self, *, algorithm, **kwargs):
        Recording.calls.append("checkpoint_loaded")


def test_each_algorithm_hook_is_called_and_may_add_to_the_result(tmp_path):
    Recording.calls = []
    ends = []
    config = (
        fast_cartpole()
        .evaluation(evaluation_duration=2)
        .callbacks(Recording, on_train_result=lambda *, result, **kw: ends.append(result["training_iteration"]))
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["custom"] == {"iteration_seen": 1}
        assert result["my_mean"] == 3.0 and result["nested"]["last"] == 1
        algo.evaluate()
        checkpoint = algo.save(tmp_path)
        algo.restore(checkpoint)
    finally:
        algo.stop()
    assert Recording.calls == ["init", "train", "evaluate_start", ("evaluate_end", True), "checkpoint_loaded"]
    assert ends == [1]


def test_a_callback_that_raises_names_its_hook():
    def broken(*, result, **kwargs):
        raise ValueError("no such metric")

    algo = fast_cartpole().callbacks(on_train_result=broken).build_algo()
    try:
        with pytest.raises(ValueError, match="no such metric") as raised:
            algo.train()
        assert any("`on_train_result` callback" in note for note in getattr(raised.value, "__notes__", []))
        # The algorithm stays usable: the iteration counted.
        assert algo.iteration == 1
    finally:
        algo.stop()


def test_env_runner_hooks_and_unknown_hooks_are_refused_by_name():
    class PerSample(RLlibCallback):
        def on_sample_end(self, *, samples, **kwargs):
            pass

    with pytest.raises(TypeError, match="PerSample.on_sample_end.*env runners"):
        fast_cartpole().callbacks(PerSample)
    with pytest.raises(TypeError, match="`on_environment_created` runs in RLlib's env runners"):
        fast_cartpole().callbacks(on_environment_created=lambda **kw: None)
    with pytest.raises(TypeError, match="`on_trian_result` is no callback hook"):
        fast_cartpole().callbacks(on_trian_result=lambda **kw: None)


def test_callbacks_survive_to_dict_and_from_dict():
    from impala_rs import IMPALAConfig

    config = fast_cartpole().callbacks(Recording)
    again = IMPALAConfig.from_dict(config.to_dict())
    assert again.to_dict()["callbacks"]["class"] is Recording
