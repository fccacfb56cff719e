"""The kernel axis: how attention is computed for a given pattern.

Every kernel has the same signature so that members can swap them freely::

    out, weights = kernel(q, k, v, pattern=..., q_offset=..., key_padding=..., bias=...,
                          dropout_p=..., scale=..., need_weights=...)

Shapes: ``q`` is ``(b, h, n, e)``; ``k`` and ``v`` are ``(b, h_kv, m, e)`` with
``h % h_kv == 0`` (grouped-query heads, Ainslie et al. 2023). ``key_padding`` is a
``(b, m)`` bool tensor, True for real keys; kernels with ``per_query_padding = True``
(sdpa, reference) also take ``(b, n, m)``, which keys each query may see (episodes
that restart inside a segment: ``SegmentMemory.restrict``). ``bias`` is an additive float score
term broadcastable to ``(b, h, n, m)`` (relative positions, ALiBi). Query i has
absolute position ``q_offset + i``; key j has absolute position j.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from ..patterns import Pattern, dense_mask, is_per_head


class Kernel(Protocol):
    name: str

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]: ...


def allowed_mask(pattern: Pattern, q: Tensor, k: Tensor, q_offset: int,
                 key_padding: Tensor | None) -> Tensor:
    """Dense ``(b|1, h|1, n, m)`` bool mask: the pattern and the key padding together."""
    n, m = q.shape[-2], k.shape[-2]
    heads = q.shape[1] if is_per_head(pattern) else 1
    allowed = dense_mask(pattern, n, m, n_heads=heads, q_offset=q_offset, device=q.device)[None]
    if key_padding is not None:
        allowed = allowed & (key_padding[:, None] if key_padding.dim() == 3 else key_padding[:, None, None, :])
    return allowed
