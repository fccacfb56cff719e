"""The residual Protocol: two steps around a sublayer f.

``h = pre(x)`` feeds f (and any memory the sublayer reads, so XL memory is normalised
like the stream), then ``x = post(x, f(h))``. A variant is one small class with these two
methods; the block never asks which one it holds.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor


class Residual(Protocol):
    def pre(self, x: Tensor) -> Tensor:
        """``x``: (b, n, d), the stream -> the sublayer's input, (b, n, d)."""

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        """``x``: the stream, ``y``: the sublayer's output, both (b, n, d) -> the new stream."""
