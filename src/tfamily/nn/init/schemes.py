"""Initialisation schemes.

The builder hands each scheme the parts whose start the papers disagree on: the linear
layers of attention (q, k, v and the output projection) and of the feed-forward, the token
embedding, the learned position table and an untied output head. Parts whose papers fix
their own start keep it under every scheme (the UT halting bias of 1.0, the adaptive-span
gate, the GTrXL gate bias): the builder never passes them here.

- ``torch``: each part's own default (``nn.Linear``'s U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  with nonzero biases; the embedding at std d^-0.5 read times sqrt(d) and the position
  table at std 1, ``nn/embedding/`` and ``nn/position/absolute.py``).
- ``normal``: GPT-2 as released and as Hugging Face's ``GPT2PreTrainedModel._init_weights``
  writes it (Radford et al. 2019, section 2.3: "we scale the weights of residual layers at
  initialization by a factor of 1/sqrt(N) where N is the number of residual layers"):
  every weight N(0, std) with std 0.02, biases zero, and the projections that write into
  the residual stream (attention output, feed-forward output) N(0, std / sqrt(2 L)), two
  residual layers per block. BERT's scheme is the same without the residual scaling.
"""
from __future__ import annotations

import math
from torch import Tensor, nn

from ...registry import INITS
from .base import InitScheme
from ...base.numbers import check_flag, check_number


class TorchDefault:
    """Keep the parts' own initialisation."""
    citation = ("each part's own initialisation: PyTorch's nn.Linear default (He et al. 2015's uniform bound "
                "1/sqrt(fan_in)), embedding std d^-0.5 read at sqrt(d), position table std 1")

    def linear(self, layer: nn.Linear, *, writes_residual: bool) -> None:
        pass

    def table(self, weight: Tensor) -> None:
        pass


class Normal:
    citation = ("Radford et al. 2019, section 2.3 and GPT-2's released code: weights N(0, 0.02), biases 0, residual "
                "output projections scaled by 1/sqrt(N) for N residual layers")

    def __init__(self, n_layers: int, std: float = 0.02, scale_residual: bool = True):
        check_number("init.params.std", std, 0.0, lo_open=True, hint="GPT-2: 0.02")
        check_flag("init.params.scale_residual", scale_residual)
        self.std = float(std)
        self.residual_std = self.std / math.sqrt(2 * n_layers) if scale_residual else self.std

    def linear(self, layer: nn.Linear, *, writes_residual: bool) -> None:
        nn.init.normal_(layer.weight, std=self.residual_std if writes_residual else self.std)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)

    def table(self, weight: Tensor) -> None:
        nn.init.normal_(weight, std=self.std)


def init_linears(scheme: InitScheme, module: nn.Module, writes_residual: nn.Module | None) -> None:
    """Every ``nn.Linear`` inside ``module``; ``writes_residual`` is the one whose output joins
    the stream (scaled by the ``normal`` scheme)."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            scheme.linear(layer, writes_residual=layer is writes_residual)


INITS.register("torch", lambda: TorchDefault())
INITS.register("normal", Normal, needs=("n_layers",))
