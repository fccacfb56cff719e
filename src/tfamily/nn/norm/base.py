"""The norm Protocol: what the residuals, the final norm and the heads call to normalise.

A norm maps each position's features to features of the same shape and dtype, with its own
gain (and bias, for LayerNorm). Where it sits (before or after a sublayer, on the embedding
sum) is decided by the residual axis and the builder, never by the norm.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor


class Norm(Protocol):
    """``x``: (..., d_model) -> (..., d_model), same dtype."""

    def __call__(self, x: Tensor) -> Tensor: ...


class MakeNorm(Protocol):
    """What ``NORMS`` registers: a constructor from the sizes the builder supplies."""

    def __call__(self, d_model: int, bias: bool = True, **params) -> Norm: ...
