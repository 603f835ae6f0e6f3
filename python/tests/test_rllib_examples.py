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
