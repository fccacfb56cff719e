"""Dense references for LSH attention. They materialise L x L (and R x L x L) tensors; for
tests and small inputs only.

``lsh_reference`` is the paper's definition written without sorting or chunking: per round,
a position's rank within its bucket and its slot in the (bucket, position) order are counts
over the whole sequence, the window rule of layout.py is a comparison of those counts, and a
query attends the union of its windows over all rounds, each key once (Kitaev et al. 2020,
eq. 3 and appendix A), with the self rule of section 2.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ...patterns import Pattern
from ..base import allowed_mask
from .layout import lsh_buckets


def dense_shared_qk(q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, key_padding: Tensor | None = None,
                    bias: Tensor | None = None, scale: float | None = None,
                    keep: Tensor | None = None) -> Tensor:
    """Dense attention with LSH's self rule (a position sees itself only when nothing else is
    allowed): what LSH attention computes when every position shares one bucket and one chunk.
    ``keep`` (broadcastable to (b, h, n, m)) further restricts the keys."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    allowed = allowed_mask(pattern, q, k, 0, key_padding)
    is_self = torch.eye(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    other = allowed & ~is_self
    if keep is not None:
        other = other & keep
    allowed = torch.where(other.any(-1, keepdim=True), other, allowed & is_self)
    acc = torch.promote_types(q.dtype, torch.float32)
    s = torch.matmul(q, k.transpose(-1, -2)).to(acc) * scale
    if bias is not None:
        s = s + bias.to(acc)
    p = torch.softmax(s.masked_fill(~allowed, torch.finfo(acc).min), dim=-1) * allowed
    return p.to(v.dtype) @ v


def lsh_windows(buckets: Tensor, chunk_len: int, *, causal: bool, same_bucket_only: bool = True) -> Tensor:
    """``(b, h, R, n)`` buckets -> ``(b, h, R, n, n)`` bool: key j is in query i's window in round r."""
    n = buckets.shape[-1]
    pos = torch.arange(n, device=buckets.device)
    same = buckets[..., :, None] == buckets[..., None, :]
    rank = (same & (pos[None, :] < pos[:, None])).sum(-1)                       # earlier, same bucket
    slot = (buckets[..., None, :] < buckets[..., :, None]).sum(-1) + rank      # (bucket, position) order
    chunk = slot // chunk_len
    near = (chunk[..., None, :] == chunk[..., :, None]) | (chunk[..., None, :] == chunk[..., :, None] - 1)
    if not same_bucket_only:
        return near
    if causal:
        back = rank[..., :, None] - rank[..., None, :]
        return same & (back >= 0) & (back <= chunk_len)
    return same & near


def lsh_reference(q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, n_buckets: int, n_hashes: int,
                  chunk_len: int, same_bucket_only: bool = True, key_padding: Tensor | None = None,
                  bias: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Hashes ``k`` with ``lsh_buckets`` (draw the same rotations as the kernel by seeding
    torch's generator alike) and attends the union of the rounds' windows."""
    buckets = lsh_buckets(k, n_buckets, n_hashes)
    if key_padding is not None:
        buckets = buckets.masked_fill(~key_padding[:, None, None, :], n_buckets)
    keep = lsh_windows(buckets, chunk_len, causal=pattern.causal, same_bucket_only=same_bucket_only).any(2)
    return dense_shared_qk(q, k, v, pattern=pattern, key_padding=key_padding, bias=bias, scale=scale, keep=keep)
