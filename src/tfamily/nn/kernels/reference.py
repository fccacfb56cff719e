"""Plain-math attention: softmax(QK^T / sqrt(d_k)) V (Vaswani et al. 2017, eq. 1).

The reference every fast path is tested against. It copies K/V per query head for
grouped-query attention and materialises the full score matrix: clear, not fast.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..patterns import Pattern
from .base import allowed_mask


class ReferenceKernel:
    citation = "Vaswani et al. 2017, eq. 1: softmax(Q K^T / sqrt(d_k)) V, dense"

    name = "reference"
    per_query_padding = True  # key_padding may be (b, n, m): ``allowed_mask`` takes it

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        h, h_kv = q.shape[1], k.shape[1]
        if h != h_kv:
            k = k.repeat_interleave(h // h_kv, dim=1)
            v = v.repeat_interleave(h // h_kv, dim=1)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = (q @ k.transpose(-1, -2)) * scale
        if bias is not None:
            scores = scores + bias
        allowed = allowed_mask(pattern, q, k, q_offset, key_padding)
        # Half precisions take the softmax in fp32; fp64 stays fp64 (this is the ground truth).
        # A finite fill keeps fully masked rows NaN-free; they are zeroed below.
        acc = torch.promote_types(scores.dtype, torch.float32)
        scores = scores.to(acc).masked_fill(~allowed, torch.finfo(acc).min)
        weights = torch.softmax(scores, dim=-1)
        weights = (weights * allowed.any(-1, keepdim=True)).to(q.dtype)
        dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        return dropped @ v, (weights if need_weights else None)
