"""Building block plans (``plan.Plan``) without an L x L mask: patterns propose candidate
tile pairs (``block_candidates``), the exact mask is evaluated only on those tiles, and empty
ones are dropped. Query rows are bucketed by how many key tiles they visit, so a global row
that sees everything does not pad every other row. ``coarsen_plan`` derives the plan at a
larger tile size from a finer one without evaluating any mask again.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..patterns import candidates, key_order
from .plan import EMPTY, FULL, Bucket, Plan

# Elements of one chunk's tile-mask evaluation (int64 temporaries are 8x this in bytes).
_CHUNK_ELEMENTS = 1 << 23
# Bucket widths (key tiles per query tile): rounding up wastes at most a third.
_LADDER = sorted({max(1, round(1.25 ** i)) for i in range(64)} | {1, 2, 3, 4, 5, 6, 8})


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
