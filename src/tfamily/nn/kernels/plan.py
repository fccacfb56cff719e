"""What a block plan is: per query tile, the key tiles it visits on the pattern's *virtual*
sequence (queries sorted by the pattern's query order; one copy of the keys per distinct key
order, laid end to end, each padded to whole tiles), and which part of each tile is allowed.

A tile entry stores no mask of its own: a tile allowed everywhere is a flag, and a partial tile
an index into the plan's table of *distinct* (B, B) masks. A window's diagonal tiles, a random
block's rectangle, a global column: each is one mask however long the sequence, so the plan's
memory is a few integers per tile entry (bigbird at 64K held 7-11 GB of per-entry masks while
its candidate plans were built). The dense (R, B, K * B) masks that the gather-and-SDPA path
feeds to SDPA are built from the table on first use (``Bucket.mask``). Built by
``plan_build``, cached and chosen by ``layout``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


# A slot's entry in ``Bucket.mids``: the tile is allowed everywhere, or the slot is empty
# (row padding, or a band slot no tile fills). Other entries index the plan's mask table.
FULL, EMPTY = -1, -2


@dataclass
class Bucket:
    """Query tiles that visit at most ``kv.shape[1]`` key tiles.

    ``rows``: (R,) layout rows, ``head * n_q_tiles + q_tile``. ``kv``: (R, K) key tile
    ids on the virtual key axis (padding slots repeat tile 0 and are masked out).
    ``mids``: (R, K) int32, ``FULL``, ``EMPTY`` or the index of the slot's (B, B) mask in
    ``masks``, the plan's table of distinct masks (U, B, B) bool. ``count``: (R,) real slots."""

    rows: Tensor
    kv: Tensor
    mids: Tensor
    masks: Tensor
    count: Tensor
    all_rows: bool = False       # rows are every layout row, in order
    band: int | None = None      # slot s of row r is key tile r + band + s (see _as_band)
    consecutive: bool = False    # rows are r0, r0 + 1, ... (a slice, not a gather)
    causal_diagonal: bool = False  # one slot per row, its own tile, lower-triangular
    cache: dict = field(default_factory=dict, repr=False)  # kernels' derived tensors

    @property
    def full(self) -> Tensor:
        """(R, K) tiles allowed everywhere."""
        return self.mids == FULL

    @property
    def live(self) -> Tensor:
        """(R, K) slots holding a tile some query of the row may see."""
        return self.mids != EMPTY

    @property
    def mask(self) -> Tensor:
        """(R, B, K * B) bool, True where query may see key: the dense masks of the gather
        path, built from the table on first use and kept (that path needs them every call)."""
        dense = self.cache.get("mask")
        if dense is None:
            R, K = self.mids.shape
            B = self.masks.shape[-1]
            table = torch.cat([self.masks, self.masks.new_ones(1, B, B), self.masks.new_zeros(1, B, B)])
            dense = self.cache["mask"] = table[self._table_index()].permute(0, 2, 1, 3).reshape(R, B, K * B)
        return dense

    def _table_index(self) -> Tensor:
        """``mids`` as indices into the table with a ones mask (FULL) and a zeros mask (EMPTY)
        appended: FULL (-1) -> U, EMPTY (-2) -> U + 1."""
        return torch.where(self.mids >= 0, self.mids, self.masks.shape[0] - 1 - self.mids).long()

    @property
    def allowed(self) -> int:
        """Allowed (query, key) pairs in the bucket, counted from the table (no dense masks)."""
        B = self.masks.shape[-1]
        per_mask = torch.cat([self.masks.flatten(1).sum(1), torch.tensor([B * B, 0], device=self.masks.device)])
        return int(per_mask[self._table_index()].sum())

    @property
    def scores(self) -> int:
        """Scores the bucket's dense tiles hold (padding slots included): R * B * K * B."""
        R, K = self.mids.shape
        return R * K * self.masks.shape[-1] ** 2


@dataclass
class Plan:
    block: int
    n: int
    n_q_tiles: int
    n_k_tiles: int
    heads: tuple | None          # global head ids when the layout differs per head
    q_index: Tensor              # (n_pad,) natural query index of each virtual query slot
    q_valid: Tensor              # (n_pad,)
    q_pos: Tensor                # (n_pad,) absolute positions (padding repeats a real one)
    k_index: Tensor              # (M,) natural key index of each virtual key slot
    k_valid: Tensor              # (M,)
    k_pos: Tensor                # (M,)
    k_part: Tensor               # (M,) which part (key copy) the slot belongs to
    k_perms: list                # per part: (m,) natural key index in that copy's order
    k_pads: list                 # per part: padded length
    buckets: list
    masks: Tensor                # (U, B, B) bool: the distinct partial tile masks (Bucket.mids index them)
    row_any: Tensor              # (H, n) natural order: the query sees some key
    q_slot: Tensor               # (n,) virtual slot of each natural query

    q_identity: bool             # virtual queries are the natural ones (no sort, no padding)
    k_identity: bool             # likewise for keys
    all_live: bool = True        # every query sees some key
    cache: dict = field(default_factory=dict, repr=False)  # kernels' derived objects (flex block mask)

    def key_slots(self) -> list[tuple[int, Tensor]]:
        """Per key copy: its start on the virtual axis and the slot of each natural key."""
        out, start = [], 0
        for perm, pad in zip(self.k_perms, self.k_pads):
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.numel(), device=perm.device)
            out.append((start, inv))
            start += pad
        return out

    def entries(self) -> tuple[Tensor, Tensor, Tensor]:
        """Every live tile entry, bucket by bucket: its layout row, key tile and ``mids`` value."""
        rows, cols, mids = [], [], []
        for bk in self.buckets:
            live = bk.live
            rows.append(bk.rows[:, None].expand(bk.kv.shape)[live])
            cols.append(bk.kv[live])
            mids.append(bk.mids[live])
        return torch.cat(rows), torch.cat(cols), torch.cat(mids)

    @property
    def n_layout_heads(self) -> int:
        return 1 if self.heads is None else len(self.heads)
