"""Local patterns: sliding windows (Longformer), global tokens, and the Image
Transformer's 1D and 2D local blocks.

Every pattern is a predicate over absolute positions (query i, key j) plus a cheap
``block_candidates`` superset so the block-sparse planner never scans L x L.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .base import check_int, tile_range
from .order import Residue, residue_overlap


@dataclass(frozen=True)
class SlidingWindow:
    """Beltagy et al. 2020, section 3.1: each query sees a window of ``window`` keys.

    Causal: keys j with 0 <= i - j < window (itself and window - 1 before). Two-sided
    (``causal=False``): |i - j| < window. ``dilation`` d > 1 keeps every d-th key of a
    window spanning window * d positions (section 3.1, "dilated sliding window"); the
    sequence is then reordered by residue mod d so the dilated window is contiguous.
    """
    citation = "Beltagy et al. 2020, section 3.1: sliding window attention"

    window: int = 256
    causal: bool = True
    dilation: int = 1
    name: str = "sliding_window"

    def __post_init__(self):
        check_int(self.name, "window", self.window)
        check_int(self.name, "dilation", self.dilation)

    @property
    def query_order(self):
        return Residue(self.dilation) if self.dilation > 1 else None

    key_order = query_order

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        d = q_idx - kv_idx
        span = self.window * self.dilation
        near = (d < span) & (d >= 0) if self.causal else (d < span) & (d > -span)
        return near & (d % self.dilation == 0) if self.dilation > 1 else near

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        reach = (self.window - 1) * self.dilation
        right = q_hi if self.causal else q_hi + reach
        cand = (k_hi[None, :] >= q_lo[:, None] - reach) & (k_lo[None, :] <= right[:, None])
        if self.dilation > 1:
            cand = cand & residue_overlap(qpos, kpos, self.dilation)
        return cand[None]


@dataclass(frozen=True)
class GlobalTokens:
    """Beltagy et al. 2020, section 3.1 ("global attention"): the first ``n_global``
    positions are seen by every query; without ``causal`` they also see every key.
    In a decoder (``causal=True``) they act as a shared prefix every query may read."""
    citation = "Beltagy et al. 2020, section 3.1: global attention on chosen tokens"

    n_global: int = 1
    causal: bool = True
    name: str = "global_tokens"

    def __post_init__(self):
        check_int(self.name, "n_global", self.n_global)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if self.causal:
            return (kv_idx < self.n_global) & (kv_idx <= q_idx)
        return (kv_idx < self.n_global) | (q_idx < self.n_global)

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, _) = tile_range(qpos), tile_range(kpos)
        cols = (k_lo < self.n_global)[None, :]
        if self.causal:
            return (cols & (k_lo[None, :] <= q_hi[:, None]))[None]
        return (cols | (q_lo < self.n_global)[:, None])[None]


@dataclass(frozen=True)
class Local1D:
    """Parmar et al. 2018, section 3.2 ("Local Attention, 1D"): the sequence is cut into
    query blocks of ``block`` positions; each query sees the ``memory`` positions before
    its block and its own block up to itself."""
    citation = "Parmar et al. 2018, section 3.2: local 1D attention, query blocks with memory blocks"

    block: int = 256
    memory: int = 256
    name: str = "local_1d"
    causal: ClassVar[bool] = True

    def __post_init__(self):
        check_int(self.name, "block", self.block)
        check_int(self.name, "memory", self.memory, lo=0)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        start = torch.div(q_idx, self.block, rounding_mode="floor") * self.block - self.memory
        return (kv_idx <= q_idx) & (kv_idx >= start)

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        start = torch.div(q_lo, self.block, rounding_mode="floor") * self.block - self.memory
        return ((k_lo[None, :] <= q_hi[:, None]) & (k_hi[None, :] >= start[:, None]))[None]


@dataclass(frozen=True)
class Local2D:
    """Parmar et al. 2018, section 3.2 ("Local Attention, 2D") and figure 2.

    An image ``width`` pixels wide is cut into query blocks of ``block_h x block_w``
    pixels, and the sequence lists pixels in block-raster order (blocks in raster
    order, pixels in raster order inside a block; see ``data.pixels.to_block_raster``). A query
    sees its block's memory rectangle, extended by ``memory_h`` rows above and
    ``memory_w`` columns left and right, restricted to positions generated before it.
    """
    citation = "Parmar et al. 2018, section 3.2 and figure 2: local 2D attention"

    width: int = 32
    block_h: int = 8
    block_w: int = 8
    memory_h: int = 8
    memory_w: int = 8
    name: str = "local_2d"
    causal: ClassVar[bool] = True

    def __post_init__(self):
        for field_, value in (("width", self.width), ("block_h", self.block_h), ("block_w", self.block_w)):
            check_int(self.name, field_, value)
        check_int(self.name, "memory_h", self.memory_h, lo=0)
        check_int(self.name, "memory_w", self.memory_w, lo=0)
        if self.width % self.block_w:
            raise ValueError(f"{self.name}: block_w={self.block_w} does not divide the image "
                             f"width={self.width}; pick a block width dividing the width")

    def pixel(self, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Block-raster position -> (row, col, block row, block col)."""
        size = self.block_h * self.block_w
        blk, t = torch.div(pos, size, rounding_mode="floor"), pos % size
        per_row = self.width // self.block_w
        br, bc = torch.div(blk, per_row, rounding_mode="floor"), blk % per_row
        r = br * self.block_h + torch.div(t, self.block_w, rounding_mode="floor")
        return r, bc * self.block_w + t % self.block_w, br, bc

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        _, _, br, bc = self.pixel(q_idx)
        r, c, _, _ = self.pixel(kv_idx)
        top, left = br * self.block_h - self.memory_h, bc * self.block_w - self.memory_w
        rows = (r >= top) & (r < br * self.block_h + self.block_h)
        cols = (c >= left) & (c < bc * self.block_w + self.block_w + self.memory_w)
        return (kv_idx <= q_idx) & rows & cols

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        # In image-block units the memory rectangle of block k is the blocks
        # k - a * per_row + d for a in [0, up], d in [-side, side].
        size, per_row = self.block_h * self.block_w, self.width // self.block_w
        up, side = -(-self.memory_h // self.block_h), -(-self.memory_w // self.block_w)
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        qb_lo, qb_hi = (torch.div(x, size, rounding_mode="floor")[:, None] for x in (q_lo, q_hi))
        kb_lo, kb_hi = (torch.div(x, size, rounding_mode="floor")[None, :] for x in (k_lo, k_hi))
        cand = torch.zeros(qb_lo.shape[0], kb_lo.shape[1], dtype=torch.bool, device=qpos.device)
        for a in range(up + 1):
            cand |= (kb_hi >= qb_lo - a * per_row - side) & (kb_lo <= qb_hi - a * per_row + side)
        return (cand & (k_lo[None, :] <= q_hi[:, None]))[None]
