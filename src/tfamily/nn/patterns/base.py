"""The pattern axis: which keys may each query see?

A pattern is a vectorised predicate over absolute positions with FlexAttention's
``mask_mod`` signature, so the same object drives the dense reference, SDPA's
boolean mask and FlexAttention's block mask.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor
from ...base import numbers


@runtime_checkable
class Pattern(Protocol):
    """``mask_mod(b, h, q_idx, kv_idx) -> bool`` (True = may attend), broadcasting.

    ``q_idx`` and ``kv_idx`` are absolute positions: with a KV cache or XL memory
    the first query sits at ``q_offset`` and the first key at 0. ``causal`` is True
    when the pattern never lets position i see j > i (kernels use it for fast paths);
    ``name`` identifies the pattern in benchmarks and block-mask caches.
    """

    name: str
    causal: bool

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor: ...


@runtime_checkable
class Order(Protocol):
    """A hashable rule ``key(pos) -> int tensor``; positions are stably sorted by it."""

    def key(self, pos: Tensor) -> Tensor: ...


# Capabilities a pattern may declare on top of ``Pattern``. Kernels test them with
# isinstance; a pattern without them is still correct, only slower to plan.


@runtime_checkable
class BlockCandidates(Protocol):
    """``block_candidates(qpos, kpos, heads) -> bool (H|1, nq, nk)``: a superset of the tile
    pairs holding any allowed (i, j). ``qpos`` (nq, B) / ``kpos`` (nk, B) are the absolute
    positions in each tile (tail padding repeats a real position); ``heads`` the head
    indices. Without it the planner tests every tile pair (O(L^2) work once per length)."""

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor: ...


@runtime_checkable
class Reordered(Protocol):
    """The orders putting the positions where the pattern is block-sparse (Child et al. 2019,
    section 4.1: strided attention is computed on the transposed sequence); None = natural."""

    @property
    def query_order(self) -> Order | None: ...

    @property
    def key_order(self) -> Order | None: ...


@runtime_checkable
class HeadDependent(Protocol):
    """``per_head``: True when ``mask_mod`` depends on h (then h is the real head index)."""

    @property
    def per_head(self) -> bool: ...


@runtime_checkable
class SoftPattern(Protocol):
    """A learned pattern (adaptive span, Sukhbaatar et al. 2019): before the kernel runs,
    ``soften`` trims keys no head can see and adds its log-weights to the score bias;
    ``memory_needed`` says how many past positions the next segment can still see."""

    def soften(self, q: Tensor, k: Tensor, v: Tensor, *, q_offset: int, key_padding: Tensor | None,
               bias: Tensor | None) -> tuple: ...

    def memory_needed(self) -> int: ...


@runtime_checkable
class LengthDependent(Protocol):
    """A pattern whose layout depends on how many keys there are (BigBird-ITC's last block):
    the attention calls ``at_length(m)`` for its m keys and hands the result to the kernel."""

    def at_length(self, m: int) -> Pattern: ...


def at_length(pattern, m: int):
    return pattern.at_length(m) if isinstance(pattern, LengthDependent) else pattern


def query_order(pattern) -> Order | None:
    return pattern.query_order if isinstance(pattern, Reordered) else None


def key_order(pattern) -> Order | None:
    return pattern.key_order if isinstance(pattern, Reordered) else None


def is_per_head(pattern) -> bool:
    return isinstance(pattern, HeadDependent) and bool(pattern.per_head)


def candidates(pattern, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
    """A pattern's tile-pair superset ``(H|1, nq, nk)``; every pair when it offers none."""
    if isinstance(pattern, BlockCandidates):
        return pattern.block_candidates(qpos, kpos, heads)
    return torch.ones(1, qpos.shape[0], kpos.shape[0], dtype=torch.bool, device=qpos.device)


def check_int(owner: str, name: str, value, lo: int = 1) -> None:
    """Pattern parameters come from user specs: refuse bad values naming them and the rule."""
    numbers.check_int(f"{owner}: {name}", value, lo)


def tile_range(pos: Tensor) -> tuple[Tensor, Tensor]:
    """``(n_tiles, B)`` positions -> each tile's lowest and highest position, ``(n_tiles,)``."""
    return pos.min(-1).values, pos.max(-1).values


def dense_mask(pattern: Pattern, n: int, m: int, *, n_heads: int = 1, q_offset: int = 0,
               device: torch.device | str | None = None) -> Tensor:
    """Materialise a pattern as a ``(h, n, m)`` bool tensor (reference and small-L use only)."""
    b = torch.zeros((), dtype=torch.long, device=device)
    h = torch.arange(n_heads, device=device).view(-1, 1, 1)
    q = torch.arange(q_offset, q_offset + n, device=device).view(1, -1, 1)
    kv = torch.arange(m, device=device).view(1, 1, -1)
    out = pattern.mask_mod(b, h, q, kv)
    return out.expand(n_heads, n, m)


def density(pattern: Pattern, n: int, *, n_heads: int = 1, rows: int = 64) -> float:
    """The fraction of the score entries a query may use that ``pattern`` keeps at length
    ``n``, averaged over heads: over keys j <= i for a causal pattern, over all keys otherwise.
    1.0 means the pattern is plain causal (or full) attention at this length. Up to ``rows``
    evenly spaced query rows are counted (every row when n <= rows), in tiles of 8 rows and
    65536 keys, so no n x n tensor is formed."""
    check_int("density", "n", n)
    q_all = torch.linspace(0, n - 1, min(n, rows)).round().long().unique()
    b, h = torch.zeros((), dtype=torch.long), torch.arange(n_heads).view(-1, 1, 1)
    kept = 0
    for q in q_all.split(8):
        for kv in torch.arange(n).split(65536):
            allowed = pattern.mask_mod(b, h, q.view(1, -1, 1), kv.view(1, 1, -1))
            kept += int(allowed.expand(n_heads, len(q), len(kv)).sum())
    seen = int((q_all + 1).sum()) if pattern.causal else len(q_all) * n
    return kept / (seen * n_heads)
