"""Pieces shared by the block-sparse A/B scripts (one attention call, b 1, h 8, d_head 64, timed
fwd+bwd): their common options, seeded inputs and the timed call."""
from __future__ import annotations

import time

import torch


def add_common_args(p, rounds: int = 4) -> None:
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=rounds)


def inputs(seq_len: int, dtype: torch.dtype, seed: int = 0):
    """q, k, v (requiring grad) and the output gradient, (1, 8, L, 64)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(1, 8, seq_len, 64, generator=gen).to(dtype) for _ in range(4))
    return (*(t.requires_grad_() for t in (q, k, v)), grad)


def causal_density(pattern, seq_len: int, n_heads: int = 8) -> float:
    """The pattern's allowed (head, query, key) triples over the dense causal ones, as the bench
    counts them: its target is 1.5 x this x dense causal SDPA's time."""
    from tfamily.bench.attention import allowed_pairs

    allowed = allowed_pairs(pattern, seq_len, n_heads, "auto", torch.device("cpu"))
    return allowed / (n_heads * seq_len * (seq_len + 1) / 2)


def fwd_bwd_ms(kernel, pattern, q, k, v, grad) -> float:
    """One forward and backward through ``kernel``, in ms (leaf gradients cleared first)."""
    q.grad = k.grad = v.grad = None
    t0 = time.perf_counter()
    kernel(q, k, v, pattern=pattern)[0].backward(grad)
    return (time.perf_counter() - t0) * 1e3
