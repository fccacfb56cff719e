"""Block layouts: which key tiles each query tile must visit, planned once per
(pattern, lengths, offset, block size, heads, device) and cached.

A plan works on a *virtual* sequence: queries sorted by the pattern's query order,
and one copy of the keys per distinct key order, laid end to end (the fixed pattern
reads its summary columns from a copy that lists them first). Each copy is padded
to whole tiles. The plan never builds an L x L mask: patterns propose candidate
tile pairs (``block_candidates``), the exact mask is evaluated only on those tiles,
and empty ones are dropped. Query rows are bucketed by how many key tiles they
visit, so a global row that sees everything does not pad every other row.

A tile entry stores no mask of its own: a tile allowed everywhere is a flag, and a
partial tile an index into the plan's table of *distinct* (B, B) masks. A window's
diagonal tiles, a random block's rectangle, a global column: each is one mask however
long the sequence, so the plan's memory is a few integers per tile entry (bigbird at
64K held 7-11 GB of per-entry masks while its candidate plans were built). The dense
(R, B, K * B) masks that the gather-and-SDPA path feeds to SDPA are built from the
table on first use (``Bucket.mask``).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..patterns import Difference, Union, candidates, is_per_head, key_order, query_order

# Elements of one chunk's tile-mask evaluation (int64 temporaries are 8x this in bytes).
_CHUNK_ELEMENTS = 1 << 23
# Bucket widths (key tiles per query tile): rounding up wastes at most a third.
_LADDER = sorted({max(1, round(1.25 ** i)) for i in range(64)} | {1, 2, 3, 4, 5, 6, 8})


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


class PlanCache:
    """Least-recently-used plans; ``builds`` counts how many were computed."""

    def __init__(self, size: int = 64):
        self.size, self.builds, self._plans = size, 0, OrderedDict()

    def get(self, key, build):
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = build()
        self.builds += 1
        self._plans[key] = plan
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return plan

    def discard(self, key) -> None:
        self._plans.pop(key, None)

    def clear(self) -> None:
        self._plans.clear()


PLANS = PlanCache(size=32)


def get_plan(parts: tuple, query_order, n: int, m: int, q_offset: int, block: int | str,
             heads: tuple | None, device: torch.device, fold: int = 1, compiled: bool = False) -> Plan:
    """``parts``: disjoint patterns, each read from its own key copy (its ``key_order``).
    ``block="auto"`` picks the tile size with the lowest modelled cost (``plan_cost``) for the
    kernel that runs it (``compiled``: the fused C++ kernel, else SDPA on gathered tiles);
    ``fold`` is how many query heads share a tile (grouped-query heads)."""
    if block == "auto":
        key = (parts, query_order, n, m, q_offset, heads, str(device), fold, compiled)
        block = _BEST.get(key)
        if block is None:
            costs = _auto_costs(parts, query_order, n, m, q_offset, heads, device, fold, compiled)
            block = min(costs, key=costs.get)
            _BEST[key] = block
            for b in costs:  # the losing candidates' plans need not sit in the cache
                if b != block:
                    PLANS.discard((parts, query_order, n, m, q_offset, b, heads, str(device)))
    key = (parts, query_order, n, m, q_offset, block, heads, str(device))
    return PLANS.get(key, lambda: build_plan(parts, query_order, n, m, q_offset, block, heads, device))


# Tile sizes tried by block="auto", and the relative cost per computed score of fused SDPA
# (forward + backward) by query rows per tile, measured on the 2-core CPU (torch 2.13,
# e=64): the CPU flash kernel splits queries into chunks of 32 below 192 rows, 64 below
# 768 and 256 above, so short tiles run below peak. Dense causal SDPA is ~1.0.
AUTO_BLOCKS = (64, 128, 256)
AUTO_BLOCKS_COMPILED = (32, 64, 128, 256)
_ROW_COST = ((64, 2.6), (128, 1.5), (256, 1.15), (512, 1.07))
# The compiled kernel (csrc/blocksparse.cpp) scores a query tile against up to 512 keys per
# GEMM, so its cost per score hardly depends on the tile: sliding window 256 at 4K, 1 thread,
# forward + backward per computed score, 1.05 (64), 1.00 (128), 1.05 (256); 32-row tiles cost
# more per score but halve the waste of narrow windows (strided at 4K: 137 ms at 32, 164 at 64). It does not fold
# grouped heads into a tile, so ``fold`` does not change its rows.
_ROW_COST_COMPILED = ((32, 1.2), (64, 1.05), (128, 1.0), (256, 1.05))
_BEST: dict = {}


def _per_score(block: int, fold: int, compiled: bool) -> float:
    rows = block if compiled else block * fold
    return next((c for r, c in (_ROW_COST_COMPILED if compiled else _ROW_COST) if rows <= r), 1.0)


def plan_cost(plan: Plan, fold: int = 1, compiled: bool = False) -> float:
    """Modelled time of a plan: computed scores weighted by the per-score cost of tiles
    with that many query rows."""
    return _per_score(plan.block, fold, compiled) * fold * sum(bk.scores for bk in plan.buckets)


def _auto_costs(parts, query_order, n, m, q_offset, heads, device, fold, compiled) -> dict:
    """``plan_cost`` of the candidate tile sizes, smallest first, stopping once no larger one can
    win. A larger candidate (a multiple of the smaller: its tiles are unions of theirs, over the
    same virtual axes) has every live smaller tile inside one of its live tiles, so its scores are
    at least the smaller plan's live area (live tiles x B^2, bucket padding left out): that times
    the cheapest per-score cost still to come bounds every larger candidate's cost from below.
    When the bound is no better than the best cost so far, the rest are not built; the pick is
    the one the full search makes (bigbird at 64K: the 256-row candidate took half the first
    call's 40 s of planning). The larger candidates are coarsened from the first one
    (``coarsen_plan``), so the patterns' masks are evaluated once."""
    sizes = [b for b in (AUTO_BLOCKS_COMPILED if compiled else AUTO_BLOCKS) if b <= max(n, 64)]
    costs: dict = {}
    fine = None
    for i, b in enumerate(sizes):
        if fine is None or b % fine.block:
            plan = fine = get_plan(parts, query_order, n, m, q_offset, b, heads, device)
        else:  # from the finest plan, without evaluating the masks again
            plan = PLANS.get((parts, query_order, n, m, q_offset, b, heads, str(device)),
                             lambda: coarsen_plan(fine, parts, query_order, n, m, q_offset, b, heads, device))
        costs[b] = plan_cost(plan, fold, compiled)
        rest = sizes[i + 1:]
        if not rest or any(r % b for r in rest):
            continue
        live = sum(int(bk.live.sum()) for bk in plan.buckets) * b * b
        bound = min(_per_score(r, fold, compiled) for r in rest) * fold * live
        if bound >= min(costs.values()):
            break
    return costs


def _ordered(pos: Tensor, order) -> Tensor:
    if order is None:
        return torch.arange(pos.numel(), device=pos.device)
    return torch.sort(order.key(pos), stable=True).indices


def _pad(index: Tensor, block: int) -> tuple[Tensor, Tensor]:
    """Pad an index list to whole tiles by repeating its last entry; return it and validity."""
    n = index.numel()
    pad = -n % block
    valid = torch.arange(n + pad, device=index.device) < n
    return torch.cat([index, index[-1:].expand(pad)]), valid


@dataclass
class _Axes:
    """A plan's virtual query and key axes at one tile size (see the module docstring)."""

    q_index: Tensor
    q_valid: Tensor
    q_pos: Tensor
    k_index: Tensor
    k_valid: Tensor
    k_part: Tensor
    k_perms: list
    k_pads: list
    n_q_tiles: int
    n_k_tiles: int
    starts: list       # per key copy: its first tile on the virtual key axis, then the end


def _axes(parts, query_order, n, m, q_offset, block, dev) -> _Axes:
    q_index, q_valid = _pad(_ordered(torch.arange(q_offset, q_offset + n, device=dev), query_order), block)
    k_perms, chunks = [], []
    for p in parts:
        perm = _ordered(torch.arange(m, device=dev), key_order(p))
        k_perms.append(perm)
        chunks.append(_pad(perm, block))
    k_index = torch.cat([c[0] for c in chunks])
    k_pads = [c[0].numel() for c in chunks]
    return _Axes(q_index, q_valid, q_index + q_offset, k_index, torch.cat([c[1] for c in chunks]),
                 torch.cat([torch.full_like(c[0], i) for i, c in enumerate(chunks)]), k_perms, k_pads,
                 q_index.numel() // block, k_index.numel() // block, _tile_starts(k_pads, block))


def _finish(ax: _Axes, parts, query_order, n, m, block, heads, grouped: dict, masks: Tensor,
            natural: Tensor) -> Plan:
    """The plan from its bucketed rows; ``natural`` (H, n): which queries see some key."""
    dev = ax.q_index.device
    H = 1 if heads is None else len(heads)
    buckets = [_collate(e, masks, H * ax.n_q_tiles) for e in _merge_small(grouped)]
    if heads is None:  # one layout shared by all heads
        buckets = [_as_band(bk) or bk for bk in buckets]
    q_slot = torch.empty(n, dtype=torch.long, device=dev)
    q_slot[ax.q_index[:n]] = torch.arange(n, device=dev)
    return Plan(block, n, ax.n_q_tiles, ax.n_k_tiles, heads, ax.q_index, ax.q_valid, ax.q_pos, ax.k_index,
                ax.k_valid, ax.k_index, ax.k_part, ax.k_perms, ax.k_pads, buckets, masks, natural, q_slot,
                query_order is None and n % block == 0,
                len(parts) == 1 and key_order(parts[0]) is None and m % block == 0,
                bool(natural.all()))


def build_plan(parts, query_order, n, m, q_offset, block, heads, device) -> Plan:
    dev = torch.device(device)
    ax = _axes(parts, query_order, n, m, q_offset, block, dev)
    q_index, q_valid, n_q_tiles, n_k_tiles, starts = ax.q_index, ax.q_valid, ax.n_q_tiles, ax.n_k_tiles, ax.starts
    H = 1 if heads is None else len(heads)
    h_ids = torch.zeros(1, dtype=torch.long, device=dev) if heads is None else torch.tensor(heads, device=dev)

    qt, kt = ax.q_pos.view(n_q_tiles, block), ax.k_index.view(n_k_tiles, block)
    tile_part = ax.k_part.view(n_k_tiles, block)[:, 0]
    grouped: dict[int, list] = {}
    table = _MaskTable(block, dev)
    row_any = torch.zeros(H, q_index.numel(), dtype=torch.bool, device=dev)
    # Query tiles per chunk: the exact masks (H, C, K, B, B) stay near _CHUNK_ELEMENTS, K being the
    # widest row of candidates seen so far, and the candidate superset (H, C, all key tiles) bool
    # within 8x that. Chunks start at one query tile and at most double, so rows that widen
    # along the sequence (causal summaries) cannot overshoot by much. The rule was one tile per
    # chunk whenever K was taken as every key tile: bigbird at 64K, 32-row tiles, ran 2,048
    # chunks of Python.
    c_max = max(1, 8 * _CHUNK_ELEMENTS // (H * max(1, n_k_tiles)))
    width, chunk, c0 = 1, 0, 0
    # Candidate superset first (cheap), then the exact mask only on candidate tiles.
    while c0 < n_q_tiles:
        chunk = max(1, min(2 * chunk, c_max, _CHUNK_ELEMENTS // (H * block * block * width)))
        c1 = min(n_q_tiles, c0 + chunk)
        cand = torch.zeros(H, c1 - c0, n_k_tiles, dtype=torch.bool, device=dev)
        for i, p in enumerate(parts):
            sl = slice(starts[i], starts[i + 1])
            cand[:, :, sl] = candidates(p, qt[c0:c1], kt[sl], heads or (0,)).expand(H, c1 - c0, -1)
        order, valid = _compact(cand)
        width = max(width, order.shape[-1])
        tiles = _tile_masks(parts, h_ids, qt[c0:c1], q_valid.view(n_q_tiles, block)[c0:c1], kt,
                            ax.k_valid.view(n_k_tiles, block), tile_part, order, valid)
        row_any[:, c0 * block:c1 * block] = tiles.any(2).any(-1).flatten(1)
        keep, valid = _compact(tiles.any(-1).any(-1))
        idx = torch.gather(order, -1, keep)
        tiles = torch.gather(tiles, 2, keep[..., None, None].expand(-1, -1, -1, block, block))
        _bucket(grouped, n_q_tiles, c0, idx, table.ids(tiles, valid))
        c0 = c1
    natural = torch.zeros(H, n, dtype=torch.bool, device=dev)
    natural[:, q_index[:n]] = row_any[:, :n]
    return _finish(ax, parts, query_order, n, m, block, heads, grouped, table.tensor(), natural)


def coarsen_plan(fine: Plan, parts, query_order, n, m, q_offset, block, heads, device) -> Plan:
    """The plan at tile size ``block``, a multiple of ``fine.block``, built from the finer plan of
    the same pattern without evaluating a mask again: a coarse tile is an f x f grid of fine tiles
    over the same virtual axes (each key copy starts on a tile boundary at both sizes), so it is
    live where any of them is, and its mask is theirs laid side by side. Two coarse masks are
    equal exactly when their grids of fine entries are (the fine table holds each mask once, none
    all-ones or all-zeros), so the coarse table is deduplicated on those grids. Equal to
    ``build_plan`` at ``block`` (tested); ``block="auto"`` costs its larger candidates this way."""
    dev = torch.device(device)
    f, B = block // fine.block, fine.block
    if f * B != block:
        raise ValueError(f"coarsen_plan: block={block} is not a multiple of the fine plan's {B}")
    ax = _axes(parts, query_order, n, m, q_offset, block, dev)
    H = 1 if heads is None else len(heads)
    rows, cols, mids = fine.entries()
    head, qt = torch.div(rows, fine.n_q_tiles, rounding_mode="floor"), rows % fine.n_q_tiles
    fine_starts = torch.tensor(_tile_starts(fine.k_pads, B), device=dev)
    part = torch.searchsorted(fine_starts[1:], cols, right=True)
    local = cols - fine_starts[part]
    kc = torch.tensor(ax.starts, device=dev)[part] + torch.div(local, f, rounding_mode="floor")
    key = (head * ax.n_q_tiles + torch.div(qt, f, rounding_mode="floor")) * ax.n_k_tiles + kc
    entries, where = torch.unique(key, return_inverse=True)  # sorted: by row, then key tile
    grid = torch.full((entries.numel(), f * f), EMPTY, dtype=torch.int32, device=dev)
    grid[where, (qt % f) * f + local % f] = mids.to(torch.int32)
    grids, which = torch.unique(grid, dim=0, return_inverse=True)
    full = (grids == FULL).all(1)
    table = torch.cat([fine.masks, fine.masks.new_ones(1, B, B), fine.masks.new_zeros(1, B, B)])
    idx = torch.where(grids >= 0, grids, fine.masks.shape[0] - 1 - grids).long()[~full]
    masks = table[idx].view(-1, f, f, B, B).permute(0, 1, 3, 2, 4).reshape(-1, block, block)
    ids = torch.full((grids.shape[0],), FULL, dtype=torch.int32, device=dev)
    ids[~full] = torch.arange(int((~full).sum()), dtype=torch.int32, device=dev)
    row = torch.div(entries, ax.n_k_tiles, rounding_mode="floor")
    counts = torch.bincount(row, minlength=H * ax.n_q_tiles)
    width = max(1, int(counts.max()))
    slot = torch.arange(entries.numel(), device=dev) - (counts.cumsum(0) - counts)[row]
    kv = torch.zeros(H * ax.n_q_tiles, width, dtype=torch.long, device=dev)
    out = torch.full((H * ax.n_q_tiles, width), EMPTY, dtype=torch.int32, device=dev)
    kv[row, slot] = entries % ax.n_k_tiles
    out[row, slot] = ids[which]
    grouped: dict[int, list] = {}
    _bucket(grouped, ax.n_q_tiles, 0, kv.view(H, ax.n_q_tiles, width), out.view(H, ax.n_q_tiles, width))
    return _finish(ax, parts, query_order, n, m, block, heads, grouped, masks, fine.row_any)


def _tile_starts(k_pads: list, block: int) -> list:
    """Per key copy (``k_pads``: padded lengths): its first tile on the virtual key axis, then the end."""
    return [0] + list(torch.tensor(k_pads).cumsum(0).div(block, rounding_mode="floor").tolist())


class _MaskTable:
    """The plan's distinct partial tile masks, filled chunk by chunk.

    Masks are matched by a 64-bit hash of their bytes (one vectorised pass), then checked
    equal to the mask stored under that hash, so a hash collision can never merge two
    different masks: a colliding mask is stored again under its own id."""

    def __init__(self, block: int, device: torch.device):
        self.block, self.device = block, device
        self._by_hash: dict[int, list[int]] = {}
        self._masks: list[Tensor] = []
        gen = torch.Generator().manual_seed(0x7F4A7C15)
        # Masks are hashed as 8-byte words when B * B bytes split into them, else byte by byte.
        self._words = block * block % 8 == 0
        n = block * block // 8 if self._words else block * block
        # Odd weights: sum(word * weight) wrapping mod 2**64 (a multiplicative hash).
        self._weights = (torch.randint(0, 2 ** 62, (n,), generator=gen) * 2 + 1).to(device)

    def _hash(self, flat: Tensor) -> Tensor:
        """(P, B * B) bool -> (P,) int64."""
        if self._words:
            words = flat.contiguous().view(torch.uint8).view(flat.shape[0], -1, 8).view(torch.int64)[..., 0]
        else:
            words = flat.long()
        return (words * self._weights).sum(-1)

    def ids(self, tiles: Tensor, valid: Tensor) -> Tensor:
        """``tiles`` (..., B, B) bool with ``valid`` (...) -> (...) int32 slot entries:
        ``FULL``, ``EMPTY`` or the table index of the slot's mask (added when new)."""
        B = self.block
        full = tiles.all(-1).all(-1) & valid
        out = torch.full(valid.shape, EMPTY, dtype=torch.int32, device=valid.device)
        out[full] = FULL
        partial = valid & ~full
        if not bool(partial.any()):
            return out
        flat = tiles[partial].reshape(-1, B * B)
        hashes, first, inverse = _unique_first(self._hash(flat))
        reps = flat[first]
        if not bool((reps[inverse] == flat).all()):  # a collision inside the chunk: compare exactly
            reps, inverse = torch.unique(flat, dim=0, return_inverse=True)
            hashes = self._hash(reps)
        ids = torch.empty(reps.shape[0], dtype=torch.int32, device=valid.device)
        for j, (hsh, rep) in enumerate(zip(hashes.tolist(), reps)):
            ids[j] = self._id(hsh, rep)
        out[partial] = ids[inverse]
        return out

    def _id(self, hsh: int, rep: Tensor) -> int:
        for i in self._by_hash.get(hsh, ()):
            if torch.equal(self._masks[i], rep):
                return i
        self._masks.append(rep.clone())
        self._by_hash.setdefault(hsh, []).append(len(self._masks) - 1)
        return len(self._masks) - 1

    def tensor(self) -> Tensor:
        """(U, B, B) bool."""
        B = self.block
        if not self._masks:
            return torch.zeros(0, B, B, dtype=torch.bool, device=self.device)
        return torch.stack(self._masks).view(-1, B, B)


def _unique_first(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """1-D ``x`` -> (unique values, the first index of each in ``x``, the inverse map)."""
    values, inverse = torch.unique(x, return_inverse=True)
    first = torch.full(values.shape, x.numel(), dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, inverse, torch.arange(x.numel(), device=x.device), "amin")
    return values, first, inverse


def _compact(sel: Tensor) -> tuple[Tensor, Tensor]:
    """``sel`` (H, C, K) bool -> indices putting selected slots first (in their order),
    trimmed to the widest row, and which of those are selected."""
    width = max(1, int(sel.sum(-1).max()))
    order = torch.sort((~sel).to(torch.uint8), dim=-1, stable=True).indices[..., :width]
    return order, torch.gather(sel, -1, order)


def _tile_masks(parts, h_ids, q_tiles, q_valid, k_tiles, k_valid, tile_part, idx, valid) -> Tensor:
    """The exact mask on the chosen tile pairs: (H, C, K, B, B)."""
    # int32 positions halve the memory traffic of the (H, C, K, B, B) evaluation.
    small = torch.int32 if max(int(q_tiles.max()), int(k_tiles.max())) < 2 ** 31 - 1 else torch.long
    b = torch.zeros((), dtype=small, device=q_tiles.device)
    h = h_ids.view(-1, 1, 1, 1, 1).to(small)
    q = q_tiles.to(small)[None, :, None, :, None]
    kv = k_tiles.to(small)[idx][..., None, :]
    part = tile_part[idx][..., None, None]
    out = None
    for i, p in enumerate(parts):
        m = p.mask_mod(b, h, q, kv) & (part == i)
        out = m if out is None else out | m
    live = q_valid[None, :, None, :, None] & k_valid[idx][..., None, :] & valid[..., None, None]
    return out & live


def _bucket(grouped: dict, n_q_tiles: int, c0: int, idx: Tensor, mids: Tensor) -> None:
    H, C, K = idx.shape
    count = (mids != EMPTY).sum(-1).clamp(min=1).flatten()
    rows = (torch.arange(H, device=idx.device)[:, None] * n_q_tiles + c0
            + torch.arange(C, device=idx.device)[None, :]).flatten()
    ladder = torch.tensor(_LADDER, device=idx.device)
    caps = ladder[torch.searchsorted(ladder, count)]
    idx, mids = idx.flatten(0, 1), mids.flatten(0, 1)
    for cap in caps.unique().tolist():
        sel = caps == cap
        pad = max(0, cap - K)
        grouped.setdefault(cap, []).append((rows[sel], torch.nn.functional.pad(idx[sel][:, :cap], [0, pad]),
                                            torch.nn.functional.pad(mids[sel][:, :cap], [0, pad], value=EMPTY),
                                            count[sel]))


def _merge_small(grouped: dict) -> list[list]:
    """Fold a bucket into the next wider one when padding it costs under 1/16 of the
    plan's work: fewer, larger SDPA calls (a window's first rows visit fewer tiles)."""
    caps = sorted(grouped)
    rows = {c: sum(len(e[0]) for e in grouped[c]) for c in caps}
    work = sum(c * r for c, r in rows.items())
    out, carry, carry_rows = [], [], 0
    for i, cap in enumerate(caps):
        entries = carry + grouped[cap]
        total_rows = carry_rows + rows[cap]
        nxt = caps[i + 1] if i + 1 < len(caps) else None
        if nxt is not None and total_rows * (nxt - cap) * 16 <= work:
            carry, carry_rows = entries, total_rows
            continue
        out.append(entries)
        carry, carry_rows = [], 0
    return out


def _collate(entries: list, masks: Tensor, n_rows: int) -> Bucket:
    K = max(e[1].shape[1] for e in entries)
    rows = torch.cat([e[0] for e in entries])
    kv = torch.cat([torch.nn.functional.pad(e[1], [0, K - e[1].shape[1]]) for e in entries])
    mids = torch.cat([torch.nn.functional.pad(e[2], [0, K - e[2].shape[1]], value=EMPTY) for e in entries])
    count = torch.cat([e[3] for e in entries])
    order = torch.argsort(rows)
    rows, kv, mids, count = rows[order], kv[order], mids[order], count[order]
    all_rows = rows.numel() == n_rows  # rows are distinct, so R == n_rows means all of them, sorted
    return Bucket(rows, kv, mids, masks, count, all_rows)


def _as_band(bk: Bucket) -> Bucket | None:
    """Re-lay a bucket whose rows read a sliding run of key tiles (row r reads tiles
    r + lo ... r + hi) so slot s is always tile r + lo + s. Kernels then read keys
    through an overlapping ``unfold`` view instead of gathering a copy per row.
    Returns None when the run is wider than the gathered layout by a quarter."""
    R, K = bk.kv.shape
    live = bk.live
    if not live.any():
        return None
    rel = bk.kv - bk.rows[:, None]
    lo, hi = int(rel[live].min()), int(rel[live].max())
    width = hi - lo + 1
    if width > K + max(1, K // 4):
        return None
    mids = torch.full((R, width), EMPTY, dtype=bk.mids.dtype, device=bk.mids.device)
    r_idx = torch.arange(R, device=bk.mids.device)
    for s in range(K):
        sel = live[:, s]
        mids[r_idx[sel], rel[sel, s] - lo] = bk.mids[sel, s]
    kv = bk.rows[:, None] + lo + torch.arange(width, device=bk.kv.device)
    consecutive = bool((bk.rows == bk.rows[0] + torch.arange(R, device=bk.rows.device)).all())
    diagonal = False
    if width == 1 and bool((mids >= 0).all()):
        B = bk.masks.shape[-1]
        tril = torch.ones(B, B, dtype=torch.bool, device=bk.masks.device).tril()
        diagonal = bool((bk.masks[mids.unique().long()] == tril).all())
    return Bucket(bk.rows, kv, mids, bk.masks, bk.count, bk.all_rows, lo, consecutive, diagonal)


@functools.lru_cache(maxsize=256)
def parts_per_head(parts: tuple) -> bool:
    """Whether any part's mask depends on the head (cached: Protocol checks walk the
    attributes on every call, and this runs on every attention call)."""
    return any(is_per_head(p) for p in parts)


@functools.lru_cache(maxsize=256)
def split(pattern) -> tuple:
    """Plan groups for a pattern: ``[(query_order, parts), ...]``.

    A union whose members need different orders is split: members sharing a query
    order form one group (one softmax), members of a group with different key orders
    read different key copies. Each member loses what earlier members allow, so a
    key is never counted twice when groups are merged by log-sum-exp.
    """
    members = _flatten(pattern)
    orders = [(query_order(p), key_order(p)) for p in members]
    if len(set(orders)) == 1:
        return ((query_order(pattern), (pattern,)),)
    by_query: OrderedDict = OrderedDict()
    for p, (qo, ko) in zip(members, orders):
        by_query.setdefault(qo, OrderedDict()).setdefault(ko, []).append(p)
    groups, earlier = [], []
    for qo, by_key in by_query.items():
        parts = []
        for ms in by_key.values():
            part = ms[0] if len(ms) == 1 else Union(*ms)
            parts.append(Difference(part, tuple(earlier)) if earlier else part)
            earlier.extend(ms)
        groups.append((qo, tuple(parts)))
    return tuple(groups)


def _flatten(pattern) -> list:
    if type(pattern) is Union:
        return [m for p in pattern.patterns for m in _flatten(p)]
    return [pattern]
