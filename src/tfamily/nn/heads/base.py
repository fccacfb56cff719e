"""The heads Protocol: how queries, keys and values are projected into heads.

Attention asks a projection for queries alone (``q``), for keys and values of a context or
memory (``kv``) and for all three of a self-attention call (``qkv``, which may fuse them
into one matmul); it reads the head counts to size its output projection. How many key/value
heads there are (MHA, GQA, MQA) is a number of the projection; the kernels broadcast
``n_kv_heads`` over the ``n_heads // n_kv_heads`` queries of each group.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor


class Heads(Protocol):
    n_heads: int
    n_kv_heads: int
    d_head: int

    def q(self, x: Tensor) -> Tensor:
        """``(b, n, d) -> (b, h, n, e)``"""

    def kv(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``(b, m, d) -> 2 x (b, h_kv, m, e)``"""

    def qkv(self, x: Tensor, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: queries from ``x`` (b, n, d), keys and values from ``src`` (b, m, d),
        which ends with ``x`` (``x`` itself, or XL memory then ``x``)."""
