"""The Sparse Transformer's factorized patterns (Child et al. 2019, section 4.1).

Each pattern is split into two sets: A1 is local, A2 reaches far.

* strided: A1 = the previous l positions (a ``SlidingWindow(l + 1)``), A2 =
  ``StridedColumns(l)`` = {j : (i - j) mod l = 0}.
* fixed: A1 = ``FixedBlock(l)`` = the same block of l, A2 = ``FixedSummary(l, c)`` =
  the last c positions of every block; heads may read different summary sub-blocks.

Section 4.2's three ways to combine them are one line each (``factorized`` below)::

    per_layer = [a1, a2]            # interleave by layer (eq. 3, via PatternSpec.per_layer)
    Union(a1, a2)                   # one merged head (eq. 4)
    PerHead([a1, a2])               # separate heads (eq. 5: heads alternate)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import check_int, tile_range
from .combine import PerHead, Union
from .local import SlidingWindow
from .order import Residue, SummaryFirst, residue_overlap, summary_member


def _causal_tiles(qpos: Tensor, kpos: Tensor) -> Tensor:
    return tile_range(kpos)[0][None, :] <= tile_range(qpos)[1][:, None]


@dataclass(frozen=True)
class StridedColumns:
    """A2 of the strided pattern: keys j <= i with (i - j) mod l = 0. Computed on the
    sequence grouped by residue, where it is a causal band (``Residue(l)`` order)."""
    citation = "Child et al. 2019, section 4.2, strided: A2 = {j : (i - j) mod l = 0}"

    stride: int = 128
    causal: bool = True
    name: str = "strided_columns"

    def __post_init__(self):
        check_int(self.name, "stride", self.stride)

    @property
    def query_order(self):
        return Residue(self.stride)

    key_order = query_order

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        d = q_idx - kv_idx
        same = d % self.stride == 0
        return same & (d >= 0) if self.causal else same

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        cand = residue_overlap(qpos, kpos, self.stride)
        return (cand & _causal_tiles(qpos, kpos) if self.causal else cand)[None]


@dataclass(frozen=True)
class FixedBlock:
    """A1 of the fixed pattern: keys in the same block of l, floor(j / l) = floor(i / l)."""
    citation = "Child et al. 2019, section 4.2, fixed: A1 = {j : floor(j / l) = floor(i / l)}"

    block: int = 128
    causal: bool = True
    name: str = "fixed_block"

    def __post_init__(self):
        check_int(self.name, "block", self.block)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        same = torch.div(q_idx, self.block, rounding_mode="floor") == torch.div(
            kv_idx, self.block, rounding_mode="floor")
        return same & (kv_idx <= q_idx) if self.causal else same

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        div = lambda x: torch.div(x, self.block, rounding_mode="floor")  # noqa: E731
        cand = (div(k_hi)[None, :] >= div(q_lo)[:, None]) & (div(k_lo)[None, :] <= div(q_hi)[:, None])
        return (cand & _causal_tiles(qpos, kpos) if self.causal else cand)[None]


@dataclass(frozen=True)
class FixedSummary:
    """A2 of the fixed pattern: the summary columns, c positions of every block of l.

    ``offsets``: head h reads the sub-block ``offsets[h % len(offsets)]`` counted from the
    block's end (offset 0 = the last c positions; section 4.1 notes distinct heads
    reading distinct sub-blocks helps). Summary keys are gathered first
    (``SummaryFirst`` order) so the band they form is dense in blocks.
    """
    citation = "Child et al. 2019, section 4.2, fixed: A2 = {j : j mod l in {l - c, ..., l - 1}}"

    block: int = 128
    summary: int = 8
    offsets: tuple = (0,)
    causal: bool = True
    name: str = "fixed_summary"

    def __post_init__(self):
        check_int(self.name, "block", self.block)
        check_int(self.name, "summary", self.summary)
        object.__setattr__(self, "offsets", tuple(self.offsets))
        if self.summary > self.block:
            raise ValueError(f"{self.name}: summary={self.summary} exceeds block={self.block}; "
                             f"the summary c must satisfy 1 <= c <= l")
        if not self.offsets:
            raise ValueError(f"{self.name}: offsets is empty; give at least one, e.g. (0,)")
        for o in self.offsets:
            check_int(self.name, "offsets[i]", o, lo=0)
            if (o + 1) * self.summary > self.block:
                raise ValueError(f"{self.name}: offset {o} with summary={self.summary} reaches past "
                                 f"the block of {self.block}; need (offset + 1) * c <= l")

    query_order = None  # queries stay in natural order; only the summary keys move

    @property
    def per_head(self) -> bool:
        return len(self.offsets) > 1

    @property
    def key_order(self):
        return SummaryFirst(self.block, self.summary, self.offsets)

    def _is_summary(self, h: Tensor, kv_idx: Tensor) -> Tensor:
        if len(self.offsets) == 1:
            return summary_member(kv_idx, self.block, self.summary, self.offsets[0])
        out = torch.zeros_like(kv_idx, dtype=torch.bool)
        for i, o in enumerate(self.offsets):
            mine = h % len(self.offsets) == i
            out = out | (mine & summary_member(kv_idx, self.block, self.summary, o))
        return out

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        s = self._is_summary(h, kv_idx)
        return s & (kv_idx <= q_idx) if self.causal else s

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        offs = [self.offsets[h % len(self.offsets)] for h in heads] if self.per_head else self.offsets
        has = torch.stack([summary_member(kpos, self.block, self.summary, o).any(-1) for o in offs])
        cand = has[:, None, :].expand(len(offs), qpos.shape[0], kpos.shape[0])
        return cand & _causal_tiles(qpos, kpos)[None] if self.causal else cand


def strided(stride: int = 128, combine: str = "heads", causal: bool = True):
    """The strided pattern as one head (``combine='merged'``) or two alternating heads.
    A1 = {max(0, i - l), ..., i}: a window of l + 1 keys, exactly as in section 4.1."""
    parts = [SlidingWindow(stride + 1, causal=causal), StridedColumns(stride, causal=causal)]
    return factorized(parts, combine, name="strided")


def fixed(block: int = 128, summary: int = 8, offsets: tuple = (0,), combine: str = "heads",
          causal: bool = True):
    """The fixed pattern as one head (``combine='merged'``) or two alternating heads."""
    parts = [FixedBlock(block, causal=causal), FixedSummary(block, summary, tuple(offsets), causal=causal)]
    return factorized(parts, combine, name="fixed")


def factorized(parts: list, combine: str, name: str):
    if combine == "merged":
        return Union(*parts, name=name)
    if combine == "heads":
        return PerHead(parts, name=name)
    raise ValueError(f"{name}: combine={combine!r} is not 'merged' or 'heads'; to interleave by "
                     f"layer list the two parts in pattern.per_layer")
