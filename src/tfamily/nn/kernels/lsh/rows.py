"""LSH attention for some query rows only: decoding with a KV cache, or XL memory.

The keys are laid out exactly as a forward pass over all of them would (layout.py: the same
hashing, sort and windows), and each query gathers the keys of its chunk and the one before
in every round, masked as the chunked path masks them. So a query attends exactly the keys
it would attend in the forward pass over the whole sequence; with a causal pattern that is
also the forward pass over the prefix that ends at it, since its window depends only on
earlier tokens. Cost O(n * rounds * chunk_len) for n queries, plus O(m log m) for the sort.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ...patterns import Pattern
from .chunks import acc_dtype, alone, self_allowed
from .layout import Layout, first_sighting


def attend_rows(q: Tensor, k: Tensor, v: Tensor, lay: Layout, pattern: Pattern, q_offset: int,
                bias: Tensor | None, dropout_p: float, scale: float) -> Tensor:
    """``q`` (b, h, n, e) at positions ``q_offset .. q_offset + n - 1`` against ``k``, ``v``
    (b, h, m, e); ``bias`` broadcastable to (b, h, n, m)."""
    b, h, n, e = q.shape
    m, c, n_rounds = k.shape[2], lay.chunk_len, lay.n_rounds
    t = torch.arange(q_offset, q_offset + n, device=q.device)
    idx = lambda x, pos: x.gather(-1, pos.reshape(b, h, 1, -1).expand(-1, -1, n_rounds, -1))  # noqa: E731
    s = lay.slot[..., t]                                                      # (b, h, R, n)
    wslots = (s - s % c)[..., None] + torch.arange(-c, c, device=q.device, dtype=s.dtype)
    exists = wslots >= 0                                                     # no chunk before the first
    kpos = lay.perm.gather(-1, wslots.clamp_min(0).long().reshape(b, h, n_rounds, -1)) \
        .view(b, h, n_rounds, n, 2 * c)                                      # (b, h, R, n, 2c)
    # Windows of the queries and slots of their keys in every round (R first): the same test
    # and the same dedup across rounds as the chunked path.
    los, his = (x[..., t].movedim(2, 0) for x in (lay.lo, lay.hi))           # (R, b, h, n)
    kslots = torch.stack([idx(lay.slot, kpos[:, :, r]) for r in range(n_rounds)])  # (R, b, h, R, n*2c)
    kslots = kslots.view(n_rounds, b, h, n_rounds, n, 2 * c)
    allowed = torch.stack([first_sighting(kslots[r].movedim(2, 0), los[..., None], his[..., None], r)
                           .squeeze(-2) for r in range(n_rounds)], dim=2) & exists
    bi = torch.arange(b, device=q.device).view(b, 1, 1, 1, 1)
    hi = torch.arange(h, device=q.device).view(1, h, 1, 1, 1)
    allowed &= pattern.mask_mod(bi, hi, t.view(1, 1, 1, n, 1), kpos)
    allowed &= lay.valid.gather(1, kpos.reshape(b, -1)).view_as(kpos)
    allowed &= kpos != t.view(1, 1, 1, n, 1)
    kpc = kpos.clamp(max=m - 1)
    kg = k.gather(2, kpc.reshape(b, h, -1, 1).expand(-1, -1, -1, e)).view(b, h, n_rounds, n, 2 * c, e)
    acc = acc_dtype(q.dtype)
    sc = torch.einsum("bhne,bhrnwe->bhrnw", q, kg).to(acc) * scale
    if bias is not None:
        full = bias.expand(b, h, n, bias.shape[-1])
        sc = sc + full.gather(-1, kpc.permute(0, 1, 3, 2, 4).reshape(b, h, n, -1)) \
            .view(b, h, n, n_rounds, 2 * c).permute(0, 1, 3, 2, 4).to(acc)
    # One softmax over every (round, key) entry: what merging the rounds by log-sum-exp gives.
    sc = sc.masked_fill(~allowed, torch.finfo(acc).min).permute(0, 1, 3, 2, 4).reshape(b, h, n, -1)
    ok = allowed.permute(0, 1, 3, 2, 4).reshape(b, h, n, -1)
    lse = torch.logsumexp(sc, dim=-1)
    p = torch.exp(sc - lse[..., None]) * ok
    if dropout_p > 0:
        p = F.dropout(p, dropout_p)
    vg = v.gather(2, kpc.permute(0, 1, 3, 2, 4).reshape(b, h, -1, 1).expand(-1, -1, -1, e)) \
        .view(b, h, n, n_rounds * 2 * c, e)
    out = torch.einsum("bhnw,bhnwe->bhne", p.to(v.dtype), vg)
    only = alone(lse, self_allowed(pattern, lay.valid, h, t))
    return torch.where(only[..., None], v[:, :, q_offset:q_offset + n], out)
