"""Norm placements: post-norm (Vaswani et al. 2017, section 5.4: LayerNorm(x + Sublayer(x))),
pre-norm (Xiong et al. 2020: the norm moves inside the branch so the identity path is clean)
and the identity-map reordering (TrXL-I, Parisotto et al. 2019, section 3.1), which also puts
a ReLU on the branch's output."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ...registry import RESIDUALS
from ..dropout import maybe_dropout
from .base import or_layer_norm


class PostNorm(nn.Module):
    citation = "Vaswani et al. 2017, section 3.1: LayerNorm(x + Sublayer(x))"

    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        return x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return self.norm(x + self.drop(y))


class PreNorm(nn.Module):
    citation = "Xiong et al. 2020 (Pre-LN), as in GPT-2 (Radford et al. 2019, section 2.3): x + Sublayer(LayerNorm(x))"

    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return x + self.drop(y)


class IdentityMap(nn.Module):
    """Parisotto et al. 2019, section 3.1 (TrXL-I): x + ReLU(Sublayer(LayerNorm(x))).

    LayerNorm acts on the sublayer's input only (XL memory goes through ``pre`` too:
    Attn(LN([SG(M), x]))), so a path from the first layer's input to the last layer's
    output carries no norm; the ReLU follows their reason: the reordering leaves two linear
    maps in sequence on that path. Zero sublayer outputs leave the block the identity map.
    """
    citation = "Parisotto et al. 2019, section 3.1 (TrXL-I): x + ReLU(Sublayer(LayerNorm(x)))"

    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return x + F.relu(self.drop(y))


# final_norm: a pre-norm stack ends unnormalised, so the builder adds one LayerNorm after it.
RESIDUALS.register("post_norm", PostNorm, needs=("d_model", "dropout", "bias", "norm"), final_norm=False)
RESIDUALS.register("pre_norm", PreNorm, needs=("d_model", "dropout", "bias", "norm"), final_norm=True)
RESIDUALS.register("identity_map", IdentityMap, needs=("d_model", "dropout", "bias", "norm"),
                   final_norm=True)
