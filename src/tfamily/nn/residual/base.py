"""The residual Protocol: two steps around a sublayer f.

``h = pre(x)`` feeds f (and any memory the sublayer reads, so XL memory is normalised
like the stream), then ``x = post(x, f(h))``. A variant is one small class with these two
methods; the block never asks which one it holds.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor, nn


class Residual(Protocol):
    def pre(self, x: Tensor) -> Tensor:
        """``x``: (b, n, d), the stream -> the sublayer's input, (b, n, d)."""

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        """``x``: the stream, ``y``: the sublayer's output, both (b, n, d) -> the new stream."""


def or_layer_norm(norm: nn.Module | None, d_model: int, bias: bool) -> nn.Module:
    """The norm the builder passes in (the norm axis, ``nn/norm/``), or a LayerNorm when a part
    is built alone."""
    return norm if norm is not None else nn.LayerNorm(d_model, bias=bias)
