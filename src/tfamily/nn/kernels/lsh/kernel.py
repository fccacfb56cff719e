"""The LSH attention kernel: parameters, validation, and which path serves a call.

A whole sequence (as many queries as keys) runs the compiled tile kernel (fused.py) where it
can, else the sorted-chunk paths of chunks.py: the memory-efficient autograd function, or plain
autograd with an additive bias or when asked.
Fewer queries than keys (decoding with a cache, XL memory) run rows.py, which attends each
query to exactly the keys the whole-sequence pass would give it. Randomness (rotations,
dropout) comes from torch's global generator, so a caller that restores the RNG state (the
reversible stack) replays the same hashing and the same dropout. Every call hashes afresh (all
cached keys too, O(m) per step), so a decoding step equals recomputing its prefix whenever the
two draw the same rotations: the same generator state, and the same bucket count (fixed
``n_buckets``, or the count derived from the prefix length that both then see).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
import torch.nn.functional as F

from ...patterns import Pattern
from .chunks import ChunkConfig, LSHFunction, attend_plain
from .fused import FusedLSHFunction, usable
from .layout import make_layout
from .rows import attend_rows
from ....base.numbers import check_flag, check_int


def _check_count(name: str, value, lo: int, fix: str) -> int:
    return check_int(f"lsh {name}", value, lo, hint=fix)


class LSHKernel:
    """Shared-QK LSH attention (Kitaev et al. 2020, section 2).

    ``n_hashes`` rounds; ``n_buckets`` (even) fixed, or derived per call from the number of
    keys as about L / ``bucket_size`` (rounded to an even count); ``chunk_len`` sorted slots
    per chunk (default ``bucket_size``). ``memory_efficient=False`` runs plain autograd.

    ``same_bucket_only=True`` (the paper, eq. 3) lets a query see only keys of its own bucket
    in its chunk window; with a causal pattern the window is the ``chunk_len`` latest earlier
    keys of its bucket, which makes the output at i a function of the tokens up to i alone
    (layout.py explains why the paper's chunk boundaries are not). ``False`` is what
    reformer-pytorch and Hugging Face's ``LSHSelfAttention`` do: every key in the query's
    chunk and the one before, whatever its bucket (more keys per query; not causal as a
    function of the input). In both, a key found in several rounds counts once (appendix A),
    and a position attends to itself only when no other key is allowed (with shared QK,
    q.k is largest at j = i).
    """
    citation = "Kitaev et al. 2020, section 2, eq. 3-4: angular LSH buckets, sort and chunk"

    name = "lsh"

    def __init__(self, n_hashes: int = 1, bucket_size: int = 64, n_buckets: int | None = None,
                 chunk_len: int | None = None, memory_efficient: bool = True, same_bucket_only: bool = True):
        self.n_hashes = _check_count("n_hashes (hash rounds)", n_hashes, 1, "use at least one round")
        self.bucket_size = _check_count("bucket_size", bucket_size, 1, "use a positive bucket size")
        if n_buckets is not None:
            _check_count("n_buckets", n_buckets, 2, "use an even count >= 2")
            if n_buckets % 2:
                raise ValueError(f"lsh n_buckets must be even (h(x) = argmax([xR; -xR]) gives 2 buckets "
                                 f"per rotation column), got {n_buckets}; use {n_buckets + 1}")
        self.n_buckets = n_buckets
        self.chunk_len = (bucket_size if chunk_len is None else
                          _check_count("chunk_len", chunk_len, 1, "use a positive chunk length"))
        for flag, value in (("memory_efficient", memory_efficient), ("same_bucket_only", same_bucket_only)):
            check_flag(f"lsh {flag}", value)
        self.memory_efficient, self.same_bucket_only = memory_efficient, same_bucket_only

    def buckets_for(self, length: int) -> int:
        if self.n_buckets is not None:
            return self.n_buckets
        return 2 * max(1, round(length / (2 * self.bucket_size)))

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            raise ValueError("kernel 'lsh' never forms the L x L weights; use kernel='reference' "
                             "to inspect attention weights")
        h, h_kv = q.shape[1], k.shape[1]
        if h != h_kv:  # grouped-query keys: each query head hashes its group's keys
            k, v = k.repeat_interleave(h // h_kv, dim=1), v.repeat_interleave(h // h_kv, dim=1)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        n, m = q.shape[-2], k.shape[-2]
        if q_offset < 0 or q_offset + n > m:
            raise ValueError(f"lsh attention: queries at positions {q_offset}..{q_offset + n - 1} need "
                             f"keys up to there (shared QK), got {m} keys")
        lay = make_layout(k, key_padding, self.buckets_for(m), self.n_hashes, self.chunk_len,
                          causal=pattern.causal, same_bucket_only=self.same_bucket_only)
        if n != m:
            return attend_rows(q, k, v, lay, pattern, q_offset, bias, dropout_p, scale), None
        cfg = ChunkConfig(pattern, scale, dropout_p, n)
        pad = lay.padded_len - n
        qp, kp, vp = (F.pad(t, (0, 0, 0, pad)) if pad else t for t in (q, k, v))
        ops = usable(q, pattern, bias) if self.memory_efficient else None
        if ops is not None:
            out = FusedLSHFunction.apply(qp, kp, vp, lay, pattern, scale,
                                         self.same_bucket_only and pattern.causal, dropout_p, ops)
        elif self.memory_efficient and bias is None:
            if dropout_p > 0:
                cfg.seed = int(torch.randint(0, 2 ** 62, ()).item())
            out = LSHFunction.apply(qp, kp, vp, lay, cfg)
        else:
            out = attend_plain(qp, kp, vp, lay, cfg, bias)
        return out[..., :n, :], None
