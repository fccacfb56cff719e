"""The heads axis: how queries, keys and values are projected into heads.

``QKVProjection`` covers multi-head (``n_kv_heads == n_heads``), grouped-query
(Ainslie et al. 2023) and multi-query (``n_kv_heads == 1``) attention: K and V
get ``n_kv_heads`` heads and the kernel broadcasts them over query groups.
``SharedQKProjection`` is the Reformer's shared-QK attention (Kitaev et al. 2020,
section 2): keys are the unit-normalised queries.
"""
from __future__ import annotations

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..registry import HEADS


def _heads(x: Tensor, h: int) -> Tensor:
    return rearrange(x, "b n (h e) -> b h n e", h=h)


class QKVProjection(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, bias: bool = True):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.kv_proj = nn.Linear(d_model, 2 * n_kv_heads * d_head, bias=bias)

    def q(self, x: Tensor) -> Tensor:
        """``(b, n, d) -> (b, h, n, e)``"""
        return _heads(self.q_proj(x), self.n_heads)

    def kv(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``(b, m, d) -> 2 x (b, h_kv, m, e)``"""
        k, v = self.kv_proj(src).chunk(2, dim=-1)
        return _heads(k, self.n_kv_heads), _heads(v, self.n_kv_heads)

    def qkv(self, x: Tensor, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: queries from ``x``, keys and values from ``src``, which ends with ``x``
        (``x`` itself, or memory then ``x``)."""
        return (self.q(x), *self.kv(src))


class SharedQKProjection(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, bias: bool = True):
        super().__init__()
        if n_kv_heads != n_heads:
            raise ValueError(f"shared_qk needs n_kv_heads == n_heads (keys are the queries), "
                             f"got n_kv_heads={n_kv_heads}, n_heads={n_heads}")
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_heads, d_head
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)

    def q(self, x: Tensor) -> Tensor:
        return _heads(self.q_proj(x), self.n_heads)

    def kv(self, src: Tensor) -> tuple[Tensor, Tensor]:
        # Kitaev et al. 2020, section 2: k_j = q_j / ||q_j|| makes q.k maximal at j = i,
        # which is why a token may attend to itself only when nothing else is available.
        k = F.normalize(self.q(src), dim=-1)
        return k, _heads(self.v_proj(src), self.n_heads)

    def qkv(self, x: Tensor, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: ``src`` ends with ``x``, so the queries are the last rows of the
        projected ``src``: one query projection serves queries and keys."""
        qs = self.q(src)
        return qs[:, :, src.shape[1] - x.shape[1]:], F.normalize(qs, dim=-1), _heads(self.v_proj(src), self.n_heads)


# The heads axis's choices by projection; the kv-head count (MHA, GQA, MQA) is a number.
HEADS.register("qkv", QKVProjection, needs=("d_model", "n_heads", "n_kv_heads", "d_head"))
HEADS.register("shared_qk", SharedQKProjection, needs=("d_model", "n_heads", "n_kv_heads", "d_head"))
