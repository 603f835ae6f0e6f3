"""RLModule classes as RLlib's users write them (``TorchRLModule`` with ``ValueFunctionAPI``)."""

from torch import nn

from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule


class TwoTowers(TorchRLModule, ValueFunctionAPI):
    """A policy MLP and a value MLP, sized by ``model_config["hidden"]``."""

    def setup(self):
        hidden = self.model_config.get("hidden", 64)
        size = self.observation_space.shape[0]
        self._pi = nn.Sequential(nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, self.action_space.n))
        self._values = nn.Sequential(nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self._pi(batch[Columns.OBS])}

    def compute_values(self, batch, embeddings=None):
        return self._values(batch[Columns.OBS]).squeeze(-1)


class NoValues(TorchRLModule):
    """A module without a value function, which IMPALA cannot train."""

    def setup(self):
        self._pi = nn.Linear(self.observation_space.shape[0], self.action_space.n)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self._pi(batch[Columns.OBS])}


class BrokenForward(TwoTowers):
    """A module whose forward pass fails on its own line."""

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self._pi(batch[Columns.OBS].reshape(-1, 3))}
