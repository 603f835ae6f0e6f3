"""Writes the embedded CartPole-v1 config's network as a TorchScript module:
`python cartpole_mlp.py OUT.pt`.

The embedded config (examples/cartpole-impala.toml) trains RLlib's fully connected net with
`fcnet_hiddens = [64, 64]`, `fcnet_activation = "tanh"` and `vf_share_layers = false`: a policy
torso and a value torso of two tanh layers each, a linear logits head on the first and a linear
value head on the second. This module is that network with the catalog's parameter names
(`torso.fc0.weight`, ..., `vf_torso.*`, `value.*`, so `_separate_vf_optimizer` finds the value
function by its `vf`/`value` prefixes) and the catalog's init: RLlib's normc(1.0) for the hidden
layers, normc(0.01) for both heads, zero biases. `impala bench-cartpole --set
model.custom_model="OUT.pt"` then trains it through libtorch's JIT, against the built-in model.
"""

import sys
from pathlib import Path
from typing import Tuple

import torch
from torch import Tensor, nn

OBS, ACTIONS, HIDDENS = 4, 2, (64, 64)


def normc(layer: nn.Linear, std: float) -> nn.Linear:
    """RLlib's `normc_initializer(std)`: each output row a normal draw rescaled to norm `std`."""
    with torch.no_grad():
        w = torch.randn_like(layer.weight)
        layer.weight.copy_(w * std / w.norm(dim=1, keepdim=True))
        layer.bias.zero_()
    return layer


class Torso(nn.Module):
    """Two tanh layers, named as the catalog's `Dense` names them (`fc0`, `fc1`)."""

    def __init__(self):
        super().__init__()
        self.fc0 = normc(nn.Linear(OBS, HIDDENS[0]), 1.0)
        self.fc1 = normc(nn.Linear(HIDDENS[0], HIDDENS[1]), 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.fc1(torch.tanh(self.fc0(x))))


class CartPoleMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = Torso()
        self.vf_torso = Torso()
        self.logits = normc(nn.Linear(HIDDENS[-1], ACTIONS), 0.01)
        self.value = normc(nn.Linear(HIDDENS[-1], 1), 0.01)

    def forward(self, obs: Tensor) -> Tuple[Tensor, Tensor]:
        return self.logits(self.torso(obs)), self.value(self.vf_torso(obs)).squeeze(1)


def main(out: Path) -> None:
    torch.manual_seed(0)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(CartPoleMlp()).save(str(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
