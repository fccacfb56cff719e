"""Transformer-XL relative positional attention (Dai et al. 2019, section 3.3).

The score between query i and key j is the sum of four terms (eq. after 3.3)::

    A_ij = q_i^T k_j        (a) content          q_i = W_q x_i, k_j = W_E^k x_j
         + q_i^T W_R^k r    (b) content-dependent position, r = r_{i-j} sinusoidal
         + u^T k_j          (c) global content bias
         + v^T W_R^k r      (d) global position bias

so (a) + (c) = (q_i + u)^T k_j and (b) + (d) = (q_i + v)^T W_R^k r_{i-j}. The
attention hook returns ``q + u`` as the query, which the kernel dots with the
content keys, and ``(q + v)^T W_R^k r_{i-j}`` as an additive score bias. ``W_R^k``
is separate from the content key weights ``W_E^k`` (which live in the projection)
and has one head per *query* head, so grouped-query heads share content keys but
not position keys.

The bias is computed with the "shift trick" (Dai et al. 2019, appendix B): the
products with the ``n + m - 1`` distinct distances are one ``(n, n + m - 1)``
matrix per head, and skewing it (a pad and a reshape, no gather) puts the entry
for distance ``q_offset + i - j`` at ``(i, j)``. That is O(n (n + m)) instead of
O(n m) embeddings of size d. Distances run from ``q_offset + n - 1`` down to
``q_offset - m + 1`` so the result is exact for every pair, not only the causal
ones, and any pattern may use it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .absolute import sinusoid_table
from ...base.numbers import check_flag, check_int


def shift(x: Tensor, n: int, m: int) -> Tensor:
    """Skew ``x``: (..., n, n + m - 1), column c holding distance ``top - c``, into
    (..., n, m) with out[..., i, j] = x[..., i, n - 1 - i + j] (distance ``top - (n-1) + i - j``).

    Row i starts n - 1 - i columns in. Padding one zero column makes the row
    length L + 1, so row i of the flattened tensor starts at i * (L + 1); reading
    it back with rows of length L shifts row i left by i (Dai et al. 2019, app. B).
    """
    length = n + m - 1
    if x.shape[-1] != length or x.shape[-2] != n:
        raise ValueError(f"shift expects (..., {n}, {length}), got {tuple(x.shape)}")
    x = F.pad(x, (0, 1))                                   # (..., n, L + 1)
    flat = x.flatten(-2)[..., n - 1: n - 1 + n * length]   # drop n - 1 leading entries
    return flat.unflatten(-1, (n, length))[..., :m]


class RelativePosition(nn.Module):
    """Dai et al. 2019 relative attention, as an ``AttentionPosition`` hook.

    ``clamp_len``: distances beyond it use r_{clamp_len} (the XL code's clamp_len,
    which lets evaluation use memories longer than any distance seen in training).
    ``same_length``: every query of a call attends over as many keys as the
    segment's first query, ``q_offset + 1`` (memory plus itself), so later queries
    get no longer context than earlier ones (the XL code's same_length, used at
    evaluation, which keeps mem_len keys, so its first query loses the oldest one);
    with no memory (``q_offset == 0``) it changes nothing.
    """
    citation = "Dai et al. 2019, section 3.3: A_ij^rel = (a) + (b) + (c) + (d) with u, v and W_{k,R}"

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, clamp_len: int | None = None,
                 same_length: bool = False):
        super().__init__()
        check_int("relative position clamp_len", clamp_len, 0, none=True)
        check_flag("relative position same_length", same_length)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.clamp_len, self.same_length = clamp_len, same_length
        self.r_proj = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_R^k
        self.u = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)
        self.v = nn.Parameter(torch.randn(n_heads, d_head) * 0.02)

    def distances(self, q_offset: int, n: int, m: int, device=None) -> Tensor:
        """The ``n + m - 1`` distances i - j, largest first, clamped to +-clamp_len."""
        d = torch.arange(q_offset + n - 1, q_offset - m, -1, device=device)
        return d if self.clamp_len is None else d.clamp(-self.clamp_len, self.clamp_len)

    def embeddings(self, d: Tensor, dtype: torch.dtype) -> Tensor:
        """``(L,) -> (h, L, e)``: W_R^k r_d for each distance d."""
        r = sinusoid_table(d, self.d_model, dtype).to(dtype)
        return rearrange(self.r_proj(r), "l (h e) -> h l e", h=self.n_heads)

    def forward(self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int,
                m: int) -> tuple[Tensor, Tensor, Tensor]:
        """``q``: (b, h, n, e) -> (q + u, k, bias (b, h, n, m)); the bias is pre-scaled by
        1/sqrt(e) because kernels scale only q.k."""
        n = q.shape[-2]
        if q.shape[1] != self.n_heads:
            raise ValueError(f"relative position built for {self.n_heads} heads got queries with {q.shape[1]}")
        r = self.embeddings(self.distances(q_offset, n, m, q.device), q.dtype)
        # Terms (b) + (d): (q_i + v)^T W_R^k r for every distance, then skewed to (i, j).
        bd = torch.einsum("bhne,hle->bhnl", q + self.v[:, None, :].to(q.dtype), r)
        bias = shift(bd, n, m) / math.sqrt(q.shape[-1])
        if self.same_length and q_offset > 0:
            # Key j (of the m) is q_offset + i - j back from query i; keep the q_offset + 1 nearest.
            i = torch.arange(n, device=q.device)[:, None]
            j = torch.arange(m, device=q.device)[None, :]
            bias = bias.masked_fill(j < i, float("-inf"))
        # Terms (a) + (c): (q_i + u)^T k_j, computed by the kernel.
        return q + self.u[:, None, :].to(q.dtype), k, bias

