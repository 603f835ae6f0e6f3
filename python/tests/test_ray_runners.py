"""Env runners as Ray actors (`env_runner_backend="ray"`) on a Ray cluster of three one-CPU
nodes on this machine (`ray.cluster_utils.Cluster`): training through them, placement, a
`register_env` creator on the cluster, multi-agent envs (native and PettingZoo) with a policy
per agent, a node removed mid-run, and nothing left behind after `stop()` or after the driver
is SIGKILLed."""

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import ray

from impala_rs import ConfigError, IMPALAConfig, ImpalaError, register_env

from conftest import tuned_cartpole
from coordination import Coordination
from corridor import Corridor


@pytest.fixture(scope="module")
def cluster():
    """A head and two worker nodes of one CPU each; Ray notices a removed node within about
    a second (its default health check takes 30)."""
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 200, "health_check_failure_threshold": 3},
        },
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def ray_cartpole(**runners):
    """The tuned CartPole config with two env runner actors of one CPU each (a learner queue
    of 2 keeps batches fresh when two runners outpace the learner)."""
    options = {"num_env_runners": 2, "env_runner_backend": "ray", "num_cpus_per_env_runner": 1}
    model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
    return (
        tuned_cartpole()
        .env_runners(**{**options, **runners})
        .training(model=model, learner_queue_size=2)
    )


def train_to(algo, target, seconds):
    """Trains until the 100-episode mean reaches `target`; the last result."""
    start = time.monotonic()
    while True:
        result = algo.train()
        if result["episode_return_mean"] >= target or time.monotonic() - start > seconds:
            return result


def runner_processes():
    """`(actors, env workers)`: the pids of the env runner actors' processes and of the env
    worker processes they started."""
    listed = subprocess.run(["ps", "-eww", "-o", "pid=,ppid=,args="], capture_output=True, text=True)
    rows = [line.split(None, 2) for line in listed.stdout.splitlines()]
    actors = {int(pid) for pid, _, args in rows if args.startswith("ray::EnvRunnerActor")}
    workers = {
        int(pid)
        for pid, ppid, args in rows
        if int(ppid) in actors and "The env worker process of impala-gym" in args
    }
    return actors, workers


def still_running(pids, seconds=30):
    """Those of `pids` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        alive = set()
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.add(pid)
            except ProcessLookupError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_cartpole_trains_with_runner_actors_spread_over_nodes(cluster):
    with ray_cartpole().resources(placement_strategy="STRICT_SPREAD").build() as algo:
        assert algo._ray_runners.server.tls_ca is None
        nodes = algo._ray_runners.node_ids()
        assert len(set(nodes.values())) == 2, nodes
        result = train_to(algo, 450, 120)
        assert result["episode_return_mean"] >= 450, result["episode_return_mean"]
        assert result["env_runners"]["num_healthy_env_runners"] == 2
        assert result["env_runners"]["num_env_runner_restarts"] == 0


def test_a_register_env_creator_trains_on_the_cluster_over_tls(cluster):
    register_env("corridor_on_ray", lambda env_config: Corridor(env_config.get("length", 4)))
    config = (
        ray_cartpole(env_runner_tls=True)
        .environment("corridor_on_ray", env_config={"length": 3})
        .env_runners(num_envs_per_env_runner=2, num_envs_per_env_worker=2, rollout_fragment_length=20)
    )
    with config.build() as algo:
        # The runners trust the run's own certificate; a driver without it serves no TLS.
        assert algo._ray_runners.server.tls_ca.startswith(b"-----BEGIN CERTIFICATE-----")
        result = train_to(algo, 0.7, 60)
        assert result["episode_return_mean"] >= 0.7, result["episode_return_mean"]


def ray_half_observed():
    """HalfObserved with a policy per agent, sampled by two env runner actors."""
    return (
        IMPALAConfig()
        .environment("HalfObserved")
        .env_runners(
            num_env_runners=2,
            env_runner_backend="ray",
            num_cpus_per_env_runner=1,
            num_envs_per_env_runner=8,
            rollout_fragment_length=10,
        )
        .training(train_batch_size=80, lr=0.003, entropy_coeff=0.003, model={"fcnet_hiddens": [16]})
        .reporting(min_time_s_per_iteration=0.25, metrics_num_episodes_for_smoothing=50)
        .debugging(seed=3)
        .multi_agent(
            policies=["left", "right"],
            policy_mapping_fn=lambda agent_id, episode, **kwargs: agent_id,
        )
    )


def train_policies_to(algo, target, seconds):
    """Trains until every policy's mean reward reaches `target`; the last result."""
    start = time.monotonic()
    while True:
        result = algo.train()
        means = result["policy_reward_mean"].values()
        if all(m is not None and m >= target for m in means) or time.monotonic() - start > seconds:
            return result


def test_a_multi_agent_env_trains_a_policy_per_agent_with_runner_actors(cluster):
    with ray_half_observed().build_algo() as algo:
        result = train_policies_to(algo, 9.5, 120)
        assert min(result["policy_reward_mean"].values()) >= 9.5, result["policy_reward_mean"]
        assert set(result["info"]["learner"]) == {"left", "right"}
        assert result["env_runners"]["num_healthy_env_runners"] == 2


def test_a_registered_pettingzoo_env_samples_in_runner_actors(cluster):
    register_env("coordination_on_ray", lambda env_config: Coordination(env_config))
    config = ray_half_observed().environment("coordination_on_ray", env_config={"length": 10})
    with config.build_algo() as algo:
        result = algo.train()
        while result["info"]["learner"].get("right", {}).get("num_grad_updates_lifetime", 0) < 3:
            result = algo.train()
        assert set(result["policy_reward_mean"]) == {"left", "right"}
        assert result["num_agent_steps_sampled"] == 2 * result["num_env_steps_sampled"]
        assert result["env_runners"]["num_healthy_env_runners"] == 2


def test_nothing_is_left_after_stop(cluster):
    config = ray_cartpole().environment(env_backend="gymnasium")
    algo = config.build()
    algo.train()
    actors, workers = runner_processes()
    assert len(actors) == 2 and len(workers) >= 2, (actors, workers)
    algo.stop()
    assert still_running(actors | workers) == set()


def our_temp_files():
    """The files impala_rs keeps in the temp folder (pickled env creators)."""
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("impala_rs_")}


def test_nothing_is_left_after_the_driver_is_killed(cluster, tmp_path):
    driver = tmp_path / "driver.py"
    before = our_temp_files()
    # A registered creator: the driver and each actor hold a pickled copy for their workers.
    driver.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            import gymnasium
            import ray
            from impala_rs import IMPALAConfig, register_env
            ray.init(address={cluster.address!r})
            register_env("killed_cartpole", lambda env_config: gymnasium.make("CartPole-v1"))
            config = (
                IMPALAConfig()
                .environment("killed_cartpole")
                .env_runners(num_env_runners=2, env_runner_backend="ray")
            )
            algo = config.build()
            algo.train()
            print("training", flush=True)
            time.sleep(600)
            """
        )
    )
    process = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True)
    # The driver prints once its runners sample; a driver that failed prints nothing.
    try:
        assert process.stdout.readline().strip() == "training"
        actors, workers = runner_processes()
        assert len(actors) == 2 and len(workers) >= 2, (actors, workers)
    finally:
        process.kill()
        process.wait()
    assert still_running(actors | workers) == set()
    # No token or creator file outlives the processes that held them.
    assert our_temp_files() - before == set()


def test_a_tune_trial_places_its_runner_actors_in_its_own_bundles(cluster, tmp_path):
    from ray import tune

    from impala_rs.tune import Impala

    # The trial's group (a driver bundle and two runner bundles of one CPU) takes all three of
    # the cluster's CPUs: runner actors outside it could not be placed, and the build would
    # fail after the connect timeout.
    config = ray_cartpole(env_runner_connect_timeout_s=20)
    results = tune.Tuner(
        Impala,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path)),
    ).fit()
    assert results.errors == []
    (result,) = list(results)
    assert result.metrics["env_runners"]["num_healthy_env_runners"] == 2
    assert result.metrics["num_env_steps_sampled"] > 0


def test_an_env_runner_on_a_removed_node_is_restarted_elsewhere(cluster):
    with ray_cartpole().resources(placement_strategy="STRICT_SPREAD").build() as algo:
        algo.train()
        # A runner's node other than the one this driver is attached to (Ray refuses to remove
        # that one).
        driver_node = ray.get_runtime_context().get_node_id()
        nodes = algo._ray_runners.node_ids()
        removed = next(node for node in nodes.values() if node != driver_node)
        cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == removed))
        result = train_to(algo, 450, 120)
        assert result["episode_return_mean"] >= 450, result["episode_return_mean"]
        assert result["env_runners"]["num_env_runner_restarts"] >= 1
        assert result["env_runners"]["num_healthy_env_runners"] == 2
        assert removed not in set(algo._ray_runners.node_ids().values())


def test_options_that_need_ray_actors_are_refused_for_threads():
    from impala_rs import IMPALAConfig

    with pytest.raises(ConfigError, match="placement_strategy"):
        IMPALAConfig().resources(placement_strategy="SPREAD").validate()
    with pytest.raises(ConfigError, match="num_env_runners"):
        IMPALAConfig().env_runners(num_env_runners=0, env_runner_backend="ray").validate()
    with pytest.raises(ConfigError, match="env_runner_tls.*--tls-cert"):
        IMPALAConfig().env_runners(env_runner_tls=True).validate()


def test_the_cli_refuses_the_ray_backend(impala_bin, tmp_path):
    done = subprocess.run(
        [impala_bin, "train", "--set", 'env_runner_backend="ray"', "--stop-iters", "1", "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "env_runner_backend" in done.stderr and "Python" in done.stderr, done.stderr


def test_an_unplaceable_group_is_a_clear_error(cluster):
    config = ray_cartpole(num_cpus_per_env_runner=4, env_runner_connect_timeout_s=2)
    with pytest.raises(ImpalaError, match="could not place 2 env runner bundle"):
        config.build()
