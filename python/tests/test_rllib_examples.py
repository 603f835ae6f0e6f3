"""The two IMPALAConfig examples of RLlib's IMPALA docs, with only the import and the trainable
changed."""


def test_build_and_train_one_iteration():
    from impala_rs import IMPALAConfig

    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(lr=0.0003, train_batch_size_per_learner=512)
        .learners(num_learners=1)
    )
    # Build a Algorithm object from the config and run 1 training iteration.
    algo = config.build()
    result = algo.train()
    assert result["training_iteration"] == 1
    assert result["num_env_steps_sampled"] > 0
    assert result["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"] is not None
    del algo


def test_tune_grid_search_runs_two_trials(tmp_path):
    from ray import tune

    from impala_rs import IMPALAConfig
    from impala_rs.tune import Impala

    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(lr=tune.grid_search([0.0001, 0.0002]), grad_clip=20.0)
        .learners(num_learners=1)
    )
    # Run with tune.
    results = tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path)),
    ).fit()
    assert results.errors == []
    assert sorted(r.config["lr"] for r in results) == [0.0001, 0.0002]
    for result in results:
        assert result.metrics["training_iteration"] == 1
        assert result.config["grad_clip"] == 20.0
        assert result.metrics["num_env_steps_sampled"] > 0


def test_tune_stops_on_the_new_api_stacks_result_names(tmp_path):
    from ray import tune

    from impala_rs import IMPALAConfig
    from impala_rs.tune import Impala

    config = IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
    # Every CartPole episode returns at least 8: the first iteration that ends one stops.
    stop = {"env_runners/episode_return_mean": 8, "training_iteration": 20}
    results = tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop=stop, storage_path=str(tmp_path)),
    ).fit()
    assert results.errors == []
    metrics = results[0].metrics
    assert metrics["env_runners"]["episode_return_mean"] >= 8
    assert metrics["training_iteration"] < 20
    assert metrics["num_env_steps_sampled_lifetime"] == metrics["num_env_steps_sampled"]
    assert metrics["learners"]["default_policy"]["total_loss"] is not None


def test_new_api_stack_calls_and_options_build_and_train():
    from impala_rs import IMPALAConfig

    config = (
        IMPALAConfig()
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(
            lr=[[0, 0.0005], [1_000_000, 0.0001]],
            entropy_coeff=[[0, 0.01], [1_000_000, 0.0]],
            grad_clip=40.0,
            grad_clip_by="norm",
            train_batch_size_per_learner=500,
        )
        # Until a train batch is trained, however loaded the machine.
        .reporting(min_time_s_per_iteration=1, min_train_timesteps_per_iteration=500)
    )
    values = config.to_dict()
    assert values["lr_schedule"] == [[0, 0.0005], [1_000_000, 0.0001]] and values["lr"] == 0.0005
    assert values["entropy_coeff_schedule"][0] == [0, 0.01] and values["grad_clip_by"] == "norm"
    algo = config.build_algo()
    try:
        result = algo.train()
        assert result["num_env_steps_trained"] > 0
        stats = result["learners"]["default_policy"]
        assert 0.0001 <= stats["cur_lr"] <= 0.0005
    finally:
        algo.stop()


def test_rl_module_model_configs_map_to_the_catalog_or_are_refused_by_name():
    import dataclasses

    import pytest

    from impala_rs import DefaultModelConfig, IMPALAConfig, MultiRLModuleSpec, RLModuleSpec

    config = IMPALAConfig().rl_module(
        model_config=DefaultModelConfig(fcnet_hiddens=[32], head_fcnet_hiddens=[16], vf_share_layers=False)
    )
    model = config.to_dict()["model"]
    assert (model["fcnet_hiddens"], model["post_fcnet_hiddens"], model["vf_share_layers"]) == ([32], [16], False)
    spec = config.get_default_rl_module_spec()
    assert spec.module_class is None and spec.model_config["head_fcnet_hiddens"] == [16]
    # RLlib's own dataclass is read by its fields; the old name and dicts too.
    @dataclasses.dataclass
    class RllibStyle:
        fcnet_hiddens: list = dataclasses.field(default_factory=lambda: [8])
        use_lstm: bool = True
        lstm_cell_size: int = 64
        lstm_use_prev_action: bool = False

    model = IMPALAConfig().rl_module(model_config_dict=RllibStyle()).to_dict()["model"]
    assert (model["fcnet_hiddens"], model["use_lstm"], model["lstm_cell_size"]) == ([8], True, 64)
    # A setting with no counterpart is refused by name, never dropped.
    with pytest.raises(TypeError, match="fcnet_use_layernorm=True"):
        IMPALAConfig().rl_module(model_config={"fcnet_use_layernorm": True})
    with pytest.raises(TypeError, match="unknown DefaultModelConfig field `fcnet_hidens`"):
        IMPALAConfig().rl_module(model_config={"fcnet_hidens": [8]})

    class MyModule:
        pass

    # A module class must be an RLModule (users' RLModules train: python/tests_rllib).
    with pytest.raises(TypeError, match="expects an RLModule subclass"):
        IMPALAConfig().rl_module(rl_module_spec=RLModuleSpec(module_class=MyModule))
    # A spec per policy sets each policy's model.
    multi = IMPALAConfig().rl_module(
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={"left": RLModuleSpec(model_config={"fcnet_hiddens": [4]})}
        ),
        algorithm_config_overrides_per_module={"left": {"lr": 0.001}},
    )
    assert multi.to_dict()["policy_config"] == {"left": {"model": {"fcnet_hiddens": [4]}, "lr": 0.001}}


def test_a_default_model_config_trains_the_catalog_model():
    from impala_rs import DefaultModelConfig, IMPALAConfig

    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32, 32]))
        .reporting(min_time_s_per_iteration=0.5, min_train_timesteps_per_iteration=1)
    )
    algo = config.build_algo()
    try:
        assert algo.train()["num_env_steps_trained"] > 0
        names = list(algo.get_weights()["default_policy"])
        assert any("32" in str(algo.get_weights()["default_policy"][n].shape) for n in names)
    finally:
        algo.stop()


def test_the_aggregator_settings_are_set_where_rllib_sets_them():
    from impala_rs import IMPALAConfig

    config = IMPALAConfig().learners(
        num_learners=1, num_aggregator_actors_per_learner=2, max_requests_in_flight_per_aggregator_actor=3
    )
    values = config.to_dict()
    assert (values["num_aggregation_workers"], values["max_requests_in_flight_per_aggregator_worker"]) == (2, 3)
    # The old stack's name stays in training().
    assert IMPALAConfig().training(num_aggregation_workers=1).to_dict()["num_aggregation_workers"] == 1


def test_rllibs_tuned_cartpole_example_reaches_its_target():
    """RLlib 2.60's `tuned_examples/impala/cartpole_impala.py` config with only the imports
    changed, run to its own target: 450 within its 2M env steps. (With its `entropy_coeff=0`
    the mean swings between 80 and 500 once there; the target is RLlib's stop, not a claim that
    it stays.)"""
    from impala_rs import DefaultModelConfig, IMPALAConfig

    config = (
        IMPALAConfig()
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
        .environment("CartPole-v1")
        .training(
            train_batch_size_per_learner=500,
            grad_clip=40.0,
            grad_clip_by="global_norm",
            lr=0.0005,
            vf_loss_coeff=0.05,
            entropy_coeff=0.0,
        )
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .debugging(seed=0)
        # Reporting only: a result every second instead of every 10 (RLlib's default), so the
        # 100-episode mean is read often; training is the example's.
        .reporting(min_time_s_per_iteration=1)
    )
    algo = config.build_algo()
    try:
        best, steps = 0.0, 0
        while steps < 2_000_000 and best < 450:
            result = algo.train()
            best = max(best, result["env_runners"]["episode_return_mean"] or 0.0)
            steps = result["num_env_steps_sampled_lifetime"]
        assert best >= 450, f"reached {best} in {steps} env steps"
    finally:
        algo.stop()
