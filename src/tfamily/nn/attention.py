"""Multi-head attention as a composition: projection (heads axis), pattern, kernel,
and an optional in-attention position part.

Vaswani et al. 2017, section 3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V). Which keys a query sees is the
pattern's business, how the scores are computed the kernel's; this module only
wires them, so no member needs a branch in here.
"""
from __future__ import annotations

from typing import Protocol

import torch
from einops import rearrange
from torch import Tensor, nn

from .heads import Heads
from .kernels import Kernel
from .patterns import Pattern, at_length
from .state import KVCache


class AttentionPosition(Protocol):
    """Positions that act inside attention (relative, rotary, ALiBi).

    Called with the new queries and keys before the keys enter any cache;
    returns them (possibly rotated) and an optional additive score bias
    broadcastable to ``(b, h, n, m)``.
    """

    def __call__(self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int,
                 m: int) -> tuple[Tensor, Tensor, Tensor | None]: ...


class Attention(nn.Module):
    def __init__(self, proj: Heads, kernel: Kernel, pattern: Pattern, d_model: int, *,
                 position: AttentionPosition | None = None, dropout: float = 0.0, bias: bool = True,
                 scale: float | None = None):
        """``scale`` multiplies q.k: None is Vaswani et al.'s 1/sqrt(d_head); T5 uses 1.0 (its
        initialisation folds the factor into W^Q, Raffel et al. 2020 / Mesh TensorFlow)."""
        super().__init__()
        self.proj, self.kernel, self.pattern, self.position = proj, kernel, pattern, position
        self.scale = scale
        self.out_proj = nn.Linear(proj.n_heads * proj.d_head, d_model, bias=bias)
        self.dropout = dropout
        self.record_weights = False  # set True (reference kernel) to keep the last weights
        self.last_weights: Tensor | None = None

    def forward(self, x: Tensor, *, context: Tensor | None = None, key_padding: Tensor | None = None,
                cache: KVCache | None = None, memory: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d) queries' stream. ``context``: (b, m, d) for cross-attention.
        ``memory``: (b, mem, d) hidden states prepended to the keys (Transformer-XL).
        ``key_padding``: (b, m) bool, True for real keys, over all keys attended; or (b, n, m), which
        keys each query may see (``LayerState.key_mask``), for kernels that take it."""
        if context is not None:
            q, (k, v) = self.proj.q(x), self._cross_kv(context, cache)
            prior = 0
        else:
            src = x if memory is None else torch.cat([memory, x], dim=1)
            q, k, v = self.proj.qkv(x, src)
            prior = cache.length if cache is not None else 0
        m = prior + k.shape[-2] if context is None else k.shape[-2]
        q_offset = m - x.shape[1] if context is None else 0
        bias = None
        if self.position is not None:
            q, k, bias = self.position(q, k, q_offset=q_offset, k_offset=prior, m=m)
        if cache is not None and context is None:
            k, v = cache.append(k, v)
        if key_padding is not None:
            _check_padding(key_padding, q.shape[0], x.shape[1], m, self.kernel)
        out, weights = self.kernel(
            q, k, v, pattern=at_length(self.pattern, m), q_offset=q_offset, key_padding=key_padding, bias=bias,
            dropout_p=self.dropout if self.training else 0.0, scale=self.scale, need_weights=self.record_weights)
        self.last_weights = weights
        return self.out_proj(rearrange(out, "b h n e -> b n (h e)"))

    def _cross_kv(self, context: Tensor, cache: KVCache | None) -> tuple[Tensor, Tensor]:
        if cache is not None and cache.kv is not None:
            return cache.kv
        k, v = self.proj.kv(context)
        return cache.set(k, v) if cache is not None else (k, v)


def _check_padding(key_padding: Tensor, b: int, n: int, m: int, kernel) -> None:
    if key_padding.dtype != torch.bool:
        raise TypeError(f"key_padding must be a bool tensor (True = real token), got {key_padding.dtype}")
    if key_padding.dim() == 3:
        if tuple(key_padding.shape) != (b, n, m):
            raise ValueError(f"a per-query key_padding has shape {tuple(key_padding.shape)}; expected (batch, "
                             f"queries, keys) = {(b, n, m)}")
        if not getattr(kernel, "per_query_padding", False):
            raise ValueError(f"kernel {kernel.name!r} takes key padding per key, (batch, keys), not per query; "
                             f"use kernel 'sdpa' or 'reference' for a per-query key mask")
    elif tuple(key_padding.shape) != (b, m):
        raise ValueError(f"key_padding has shape {tuple(key_padding.shape)}; expected (batch, keys) = "
                         f"{(b, m)}")
