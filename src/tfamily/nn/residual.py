"""The residual axis: how a sublayer joins the stream.

A residual is two steps around a sublayer f: ``h = pre(x)`` feeds f (and any
memory the sublayer reads, so XL memory is normalised like the stream), then
``x = post(x, f(h))``. Post-norm is the vanilla Transformer (Vaswani et al. 2017,
section 5.4: LayerNorm(x + Sublayer(x))); pre-norm (Xiong et al. 2020) moves the
norm inside the branch so the identity path is clean. The identity-map reordering
(TrXL-I, Parisotto et al. 2019, section 3.1) also puts a ReLU on the branch's output, and
the gated residuals of their section 3.2 (``nn/gates.py``) replace its sum with a gate.
"""
from __future__ import annotations

from typing import Protocol

import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import RESIDUALS
from .dropout import maybe_dropout


class Residual(Protocol):
    def pre(self, x: Tensor) -> Tensor: ...

    def post(self, x: Tensor, y: Tensor) -> Tensor: ...


class PostNorm(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.norm, self.drop = nn.LayerNorm(d_model, bias=bias), maybe_dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        return x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return self.norm(x + self.drop(y))


class PreNorm(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.norm, self.drop = nn.LayerNorm(d_model, bias=bias), maybe_dropout(dropout)

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

    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.norm, self.drop = nn.LayerNorm(d_model, bias=bias), maybe_dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return x + F.relu(self.drop(y))


# final_norm: a pre-norm stack ends unnormalised, so the builder adds one LayerNorm after it.
RESIDUALS.register("post_norm", PostNorm, needs=("d_model", "dropout", "bias"), final_norm=False)
RESIDUALS.register("pre_norm", PreNorm, needs=("d_model", "dropout", "bias"), final_norm=True)
RESIDUALS.register("identity_map", IdentityMap, needs=("d_model", "dropout", "bias"), final_norm=True)
