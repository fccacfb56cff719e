"""Projections into heads.

``QKVProjection`` covers multi-head (``n_kv_heads == n_heads``), grouped-query
(Ainslie et al. 2023) and multi-query (``n_kv_heads == 1``) attention: K and V
get ``n_kv_heads`` heads and the kernel broadcasts them over query groups.
``SharedQKProjection`` is the Reformer's shared-QK attention (Kitaev et al. 2020,
section 2): keys are the unit-normalised queries.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ...registry import HEADS


def _heads(x: Tensor, h: int) -> Tensor:
    return rearrange(x, "b n (h e) -> b h n e", h=h)


class QKVProjection(nn.Module):
    """One weight for queries, keys and values, rows ``[q (h e); k (h_kv e); v (h_kv e)]``:
    self-attention projects them with one matmul (one GEMM and one backward instead of
    two), cross-attention and XL memory use the query rows and the key/value rows apart.
    Checkpoints with the former separate ``q_proj``/``kv_proj`` weights still load (they
    are the same rows, stacked; ``_stack_old_names``)."""
    citation = ("Vaswani et al. 2017, section 3.2.2 (multi-head); shared key/value heads: Shazeer 2019 (multi-query), "
                "Ainslie et al. 2023 (grouped-query)")

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, bias: bool = True):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.qkv_proj = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * d_head, bias=bias)
        self._register_load_state_dict_pre_hook(_stack_old_names)

    def _rows(self, start: int, stop: int) -> tuple[Tensor, Tensor | None]:
        b = self.qkv_proj.bias
        return self.qkv_proj.weight[start:stop], None if b is None else b[start:stop]

    def q(self, x: Tensor) -> Tensor:
        """``(b, n, d) -> (b, h, n, e)``"""
        return _heads(F.linear(x, *self._rows(0, self.n_heads * self.d_head)), self.n_heads)

    def kv(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``(b, m, d) -> 2 x (b, h_kv, m, e)``"""
        k, v = F.linear(src, *self._rows(self.n_heads * self.d_head, None)).chunk(2, dim=-1)
        return _heads(k, self.n_kv_heads), _heads(v, self.n_kv_heads)

    def qkv(self, x: Tensor, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: queries from ``x``, keys and values from ``src``, which ends with ``x``
        (``x`` itself, or memory then ``x``)."""
        if src is not x:
            return (self.q(x), *self.kv(src))
        b, n, _ = x.shape
        heads = self.qkv_proj(x).view(b, n, -1, self.d_head).transpose(1, 2)   # (b, h + 2 h_kv, n, e)
        return heads.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=1)


def _stack_old_names(state_dict: dict, prefix: str, *_) -> None:
    """Checkpoints from before the fused projection: ``q_proj.*`` and ``kv_proj.*`` become the
    query and key/value rows of ``qkv_proj.*``."""
    for kind in ("weight", "bias"):
        q, kv = prefix + "q_proj." + kind, prefix + "kv_proj." + kind
        if q in state_dict and kv in state_dict:
            state_dict[prefix + "qkv_proj." + kind] = torch.cat([state_dict.pop(q), state_dict.pop(kv)])


class SharedQKProjection(nn.Module):
    citation = "Kitaev et al. 2020, section 2: shared-QK, k_j = q_j / |q_j|"

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
HEADS.register("qkv", QKVProjection, needs=("d_model", "n_heads", "n_kv_heads", "d_head", "bias"))
HEADS.register("shared_qk", SharedQKProjection, needs=("d_model", "n_heads", "n_kv_heads", "d_head", "bias"))
