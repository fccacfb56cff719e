"""Tile views for the block-sparse kernel: gather each bucket's query and key tiles,
its masks and score bias, and put results back in natural order.

``SharedTiles``: one layout for all heads (grouped-query heads folded into a tile's
rows). ``PerHeadTiles``: a layout per head (patterns whose mask depends on h).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .gather import permute, reorder, take
from .plan import Plan


def tile_ids(bk, n_k_tiles: int) -> Tensor:
    """The bucket's key tile ids, flattened; a band's slots past either end (always
    masked out) read tile 0 or the last tile instead."""
    ids = bk.cache.get("tile_ids")
    if ids is None:
        ids = bk.cache["tile_ids"] = bk.kv.clamp(0, n_k_tiles - 1).flatten()
    return ids


class SharedTiles:
    """One layout for all heads: rows are (kv head, query tile); a tile holds the g query
    heads of that kv head (b * h_kv, R, g * B, e) against (b * h_kv, R, K * B, e)."""

    row_dim = 2

    def __init__(self, plan: Plan, q: Tensor, k: Tensor, v: Tensor):
        self.plan, self.B = plan, plan.block
        self.b, self.h, _, self.e = q.shape
        self.h_kv = k.shape[1]
        self.g = self.h // self.h_kv
        self.q = q.view(self.b, self.h_kv, self.g, plan.n_q_tiles, self.B, self.e)
        self.k = k.reshape(self.b * self.h_kv, plan.n_k_tiles, self.B, self.e)
        self.v = v.reshape(self.b * self.h_kv, plan.n_k_tiles, self.B, self.e)

    def gather(self, bk, kp):
        b, hk, g, B, e = self.b, self.h_kv, self.g, self.B, self.e
        R, K = bk.kv.shape
        qt = self.q if bk.all_rows else (self.q[:, :, :, int(bk.rows[0]):int(bk.rows[0]) + R]
                                         if bk.consecutive else take(self.q, 3, bk.rows))
        qt = qt.transpose(2, 3).reshape(b * hk, R, g * B, e)
        # A band read by consecutive rows is a slice of an unfold view (no copy). Other
        # rows gather whole key tiles: an index_select over the unfold view copies strided
        # windows and its backward zeroes every window before unfold_backward (local_2d
        # at 16K, `tfamily bench attention`: 5.4-6.4 s with it, 5.0-5.4 s without).
        band = bk.band is not None and bk.consecutive
        if band:
            kt, vt = (self._band(t, bk) for t in (self.k, self.v))
        else:
            flat = tile_ids(bk, self.plan.n_k_tiles)
            kt = take(self.k, 1, flat).view(b * hk, R, K * B, e)
            vt = take(self.v, 1, flat).view(b * hk, R, K * B, e)
        allowed = bk.mask[:, None].expand(R, g, B, K * B).reshape(1, R, g * B, K * B)
        if kp is not None:
            if band:
                kpt = self._band(kp.view(b, -1, B, 1), bk)
            else:
                kpt = kp.view(b, -1, B).index_select(1, tile_ids(bk, self.plan.n_k_tiles))
            allowed = (allowed[None] & kpt.reshape(b, 1, R, 1, K * B)).expand(
                b, hk, R, g * B, K * B).reshape(b * hk, R, g * B, K * B)
        return qt, kt, vt, allowed

    def _band(self, t: Tensor, bk) -> Tensor:
        """(N, tiles, B, x) -> (N, R, K * B, x): overlapping windows of K tiles, a view of
        the (padded) keys; row r's window starts at tile r + band."""
        N, n_tiles, B, x = t.shape
        R, K = bk.kv.shape
        first, last = int(bk.kv[0, 0]), int(bk.kv[-1, -1])
        lo, hi = max(0, -min(first, int(bk.kv[:, 0].min()))), max(0, max(last, int(bk.kv[:, -1].max())) + 1 - n_tiles)
        flat = t.reshape(N, n_tiles * B, x)
        if lo or hi:
            flat = F.pad(flat, (0, 0, lo * B, hi * B))
        windows = flat.unfold(1, K * B, B).transpose(-1, -2)   # window w starts at tile w - lo
        start = int(bk.kv[0, 0]) + lo   # rows are consecutive (see gather)
        return windows[:, start:start + R]

    def bias(self, bk, bias: Tensor) -> Tensor:
        b, hk, g, B = self.b, self.h_kv, self.g, self.B
        R, K = bk.kv.shape
        full = bias.expand(b, self.h, *bias.shape[2:])
        bi = torch.arange(b, device=bias.device).view(b, 1, 1, 1, 1, 1)
        hi = torch.arange(self.h, device=bias.device).view(1, hk, 1, g, 1, 1)
        qi = self.plan.q_index.view(-1, B)[bk.rows].view(1, 1, R, 1, B, 1)
        ki = self.plan.k_index.view(-1, B)[bk.kv.clamp(0, self.plan.n_k_tiles - 1)].view(1, 1, R, 1, 1, K * B)
        return full[bi, hi, qi, ki].reshape(b * hk, R, g * B, K * B)

    def scatter(self, t: Tensor) -> Tensor:
        """(b * h_kv, R, g * B, x) -> (b, h, R, B, x)"""
        R, x = t.shape[1], t.shape[-1]
        t = t.view(self.b, self.h_kv, R, self.g, self.B, x).transpose(2, 3)
        return t.reshape(self.b, self.h, R, self.B, x)

    def natural(self, rows: Tensor | None):
        return _put_back(self.plan, self.b, self.h, rows, dim=2)


class PerHeadTiles:
    """A layout per head: rows are (head, query tile), (b, R, B, e) against (b, R, K * B, e)."""

    row_dim = 1

    def __init__(self, plan: Plan, q: Tensor, k: Tensor, v: Tensor):
        self.plan, self.B = plan, plan.block
        self.b, self.h, _, self.e = q.shape
        self.g = self.h // k.shape[1]
        self.q = q.reshape(self.b, self.h * plan.n_q_tiles, self.B, self.e)
        self.k = k.reshape(self.b, k.shape[1] * plan.n_k_tiles, self.B, self.e)
        self.v = v.reshape(self.b, k.shape[1] * plan.n_k_tiles, self.B, self.e)

    def _split(self, bk):
        return torch.div(bk.rows, self.plan.n_q_tiles, rounding_mode="floor"), bk.rows % self.plan.n_q_tiles

    def gather(self, bk, kp):
        R, K = bk.kv.shape
        hl, _ = self._split(bk)
        hk = torch.div(hl, self.g, rounding_mode="floor")[:, None]
        flat = (hk * self.plan.n_k_tiles + bk.kv).flatten()
        qt = self.q if bk.all_rows else take(self.q, 1, bk.rows)
        kt = take(self.k, 1, flat).view(self.b, R, K * self.B, self.e)
        vt = take(self.v, 1, flat).view(self.b, R, K * self.B, self.e)
        allowed = bk.mask[None]
        if kp is not None:
            kpt = kp.view(self.b, -1, self.B).index_select(1, bk.kv.flatten())
            allowed = allowed & kpt.view(self.b, R, 1, K * self.B)
        return qt, kt, vt, allowed

    def bias(self, bk, bias: Tensor) -> Tensor:
        R, K = bk.kv.shape
        B = self.B
        hl, _ = self._split(bk)
        full = bias.expand(self.b, self.h, *bias.shape[2:])
        bi = torch.arange(self.b, device=bias.device).view(-1, 1, 1, 1)
        qi = self.plan.q_index.view(-1, B)[bk.rows % self.plan.n_q_tiles].view(1, R, B, 1)
        ki = self.plan.k_index.view(-1, B)[bk.kv].view(1, R, 1, K * B)
        return full[bi, hl.view(1, R, 1, 1), qi, ki]

    def scatter(self, t: Tensor) -> Tensor:
        return t

    def natural(self, rows: Tensor | None):
        return _put_back(self.plan, self.b, self.h, rows, dim=1)


def _put_back(plan, b: int, h: int, rows: Tensor | None, dim: int):
    """The function that returns tile outputs to natural query order: undo the row-group
    order ``rows`` along ``dim`` (where the layout keeps its tile axis), then the plan's query
    permutation."""
    order = None if rows is None else torch.argsort(rows)

    def put_back(t: Tensor) -> Tensor:
        t = t if order is None else permute(t, dim, order)
        t = t.reshape(b, h, -1, t.shape[-1])
        if plan.q_identity:
            return t
        return reorder(t, 2, plan.q_slot, ((0, plan.n, plan.q_index),), plan.q_valid)
    return put_back
