"""RLlib's tuned Pendulum settings on a one-step continuous bandit, in impala-rs or in RLlib
2.60: the reward is -(a - 0.5)^2 for an action a in [-1, 1], so the best Gaussian mean is 0.5
and any policy that ends at a bound is the algorithm's collapse, not the env's difficulty.
Prints one JSON line per iteration: the mean return (-0.25 and -2.25 are the two bounds).

    .venv-rllib/bin/python scripts/continuous_bandit.py impala_rs 60
    .venv-rllib/bin/python scripts/continuous_bandit.py rllib 60     # ray[rllib] 2.60
"""

import json
import sys
import time

import gymnasium as gym
import numpy as np


class Bandit(gym.Env):
    """One step; the observation is always 0."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward = -float((np.clip(action[0], -1, 1) - 0.5) ** 2)
        return np.zeros(1, np.float32), reward, True, False, {}


def main(which, seconds):
    if which == "rllib":
        import ray
        from ray.rllib.algorithms.impala import IMPALAConfig

        # Two logical CPUs would leave RLlib's aggregator actor unscheduled.
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    else:
        from impala_rs import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    # pendulum_impala.py's settings, with no entropy bonus: nothing here needs exploring.
    config = (
        IMPALAConfig()
        .environment(Bandit)
        .env_runners(num_envs_per_env_runner=5)
        .training(train_batch_size_per_learner=256, grad_clip=40.0, grad_clip_by="global_norm",
                  lr=0.0003, vf_loss_coeff=0.05, entropy_coeff=0.0)
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True, fcnet_hiddens=[512, 512]))
        .reporting(min_time_s_per_iteration=2)
    )
    algo = config.build_algo()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        result = algo.train()
        print(json.dumps({
            "s": round(time.monotonic() - start, 1),
            "env_steps": result.get("num_env_steps_sampled_lifetime"),
            "episode_return_mean": result["env_runners"].get("episode_return_mean"),
        }), flush=True)
    algo.stop()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
