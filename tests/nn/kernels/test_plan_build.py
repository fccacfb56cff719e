"""Building block plans: entries index a table of distinct masks that does not grow with the
sequence, the dense masks rebuilt from it are the pattern's, and a plan coarsened from a finer
one is the plan built at that tile size."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import layout, plan_build
from tfamily.nn.kernels.layout import split
from tfamily.nn.kernels.plan import EMPTY
from tfamily.nn.kernels.plan_build import build_plan
from tfamily.nn.patterns.examples import examples

BLOCK = 16
CPU = torch.device("cpu")


def _plans(pattern, n, block=BLOCK, heads=(0, 1, 2)):
    out = []
    for qo, parts in split(pattern):
        per_head = layout.parts_per_head(parts)
        out.append(build_plan(parts, qo, n, n, 0, block, heads if per_head else None, CPU))
    return out


def _exact(plan, parts, bk):
    """The bucket's (R, B, K * B) mask evaluated from the patterns' mask_mod on its tiles."""
    B = plan.block
    R, K = bk.kv.shape
    head = torch.div(bk.rows, plan.n_q_tiles, rounding_mode="floor")
    h = (head if plan.heads is None else torch.tensor(plan.heads)[head]).view(R, 1, 1, 1)
    q = plan.q_pos.view(-1, B)[bk.rows % plan.n_q_tiles].view(R, 1, B, 1)
    kv = bk.kv.clamp(0, plan.n_k_tiles - 1)
    k = plan.k_pos.view(-1, B)[kv].view(R, K, 1, B)
    part = plan.k_part.view(-1, B)[kv].view(R, K, 1, B)
    b = torch.zeros((), dtype=torch.long)
    allowed = torch.zeros(R, K, B, B, dtype=torch.bool)
    for i, p in enumerate(parts):
        allowed |= p.mask_mod(b, h, q, k) & (part == i)
    live = plan.q_valid.view(-1, B)[bk.rows % plan.n_q_tiles].view(R, 1, B, 1) & plan.k_valid.view(-1, B)[kv].view(R, K, 1, B)
    slot = (bk.mids != EMPTY) & (bk.kv >= 0) & (bk.kv < plan.n_k_tiles)
    return (allowed & live & slot[..., None, None]).permute(0, 2, 1, 3).reshape(R, B, K * B)


@pytest.mark.parametrize("block", [BLOCK, 6])  # 6 x 6 masks are not whole 8-byte words: hashed bytewise
@pytest.mark.parametrize("name", list(examples(200, toys=True)))
def test_entries_index_distinct_masks_that_rebuild_the_exact_mask(name, block):
    pattern = examples(200, toys=True)[name]
    for plan, (_, parts) in zip(_plans(pattern, 200, block=block), split(pattern)):
        assert plan.masks.unique(dim=0).shape[0] == plan.masks.shape[0]
        assert not bool(plan.masks.all(-1).all(-1).any())  # a tile allowed everywhere is FULL, not a mask
        for bk in plan.buckets:
            assert bool(((bk.mids >= EMPTY) & (bk.mids < plan.masks.shape[0])).all())
            torch.testing.assert_close(bk.mask, _exact(plan, parts, bk), rtol=0, atol=0)
            assert torch.equal(bk.full, bk.mask.view(bk.mask.shape[0], block, -1, block).all(1).all(-1))


@pytest.mark.parametrize("name", ["sliding_window", "longformer", "local_1d", "bigbird", "fixed_heads"])
def test_mask_table_does_not_grow_with_length(name):
    # Patterns sized for 1K at 1K, 2K and 4K: the tile entries double with L, the distinct
    # masks do not (bigbird's random blocks can only land in so many places in a tile).
    pattern = examples(1024)[name]
    tables = [sum(p.masks.shape[0] for p in _plans(pattern, n, block=64, heads=tuple(range(8))))
              for n in (1024, 2048, 4096)]
    entries = [sum(int(bk.live.sum()) for p in _plans(pattern, n, block=64, heads=tuple(range(8)))
                   for bk in p.buckets) for n in (1024, 4096)]
    assert entries[1] >= 3.5 * entries[0]
    assert tables[2] <= tables[0] * 1.25 + 4, tables


def test_a_hash_collision_never_merges_two_masks(monkeypatch):
    pattern = examples(200, toys=True)["bigbird"]
    honest = _plans(pattern, 200)
    monkeypatch.setattr(plan_build._MaskTable, "_hash", lambda self, flat: torch.zeros(flat.shape[0], dtype=torch.long))
    colliding = _plans(pattern, 200)
    for a, b in zip(honest, colliding):
        assert b.masks.shape == a.masks.shape
        for x, y in zip(a.buckets, b.buckets):
            assert torch.equal(x.mask, y.mask)


@pytest.mark.parametrize("name", ["bigbird", "longformer", "fixed_merged", "mixed_heads"])
def test_allowed_and_scores_count_the_dense_masks(name):
    pattern = examples(200, toys=True)[name]
    for plan in _plans(pattern, 200):
        for bk in plan.buckets:
            assert bk.allowed == int(bk.mask.sum())
            assert bk.scores == bk.mask.numel()


def _entries(plan):
    """(row, key tile) -> the tile's (B, B) mask, for every live entry."""
    out = {}
    for bk in plan.buckets:
        B = plan.block
        dense = bk.mask.view(bk.kv.shape[0], B, -1, B).permute(0, 2, 1, 3)
        for r, s in bk.live.nonzero().tolist():
            out[(int(bk.rows[r]), int(bk.kv[r, s]))] = dense[r, s]
    return out


@pytest.mark.parametrize("factor", [2, 4])
@pytest.mark.parametrize("name", [n for n in examples(300, toys=True) if n != "causal"])
def test_a_coarsened_plan_is_the_plan_built_at_that_tile_size(name, factor):
    pattern = examples(300, toys=True)[name]
    for n, m, q_offset in ((300, 300, 0), (77, 300, 223)):  # lengths off the tiles; a query offset
        for qo, parts in split(pattern):
            heads = (0, 1, 2) if layout.parts_per_head(parts) else None
            fine = build_plan(parts, qo, n, m, q_offset, 8, heads, CPU)
            got = plan_build.coarsen_plan(fine, parts, qo, n, m, q_offset, 8 * factor, heads, CPU)
            want = build_plan(parts, qo, n, m, q_offset, 8 * factor, heads, CPU)
            for field in ("q_index", "q_valid", "k_index", "k_valid", "k_part", "row_any", "q_slot"):
                assert torch.equal(getattr(got, field), getattr(want, field)), field
            assert (got.q_identity, got.k_identity, got.all_live) == (want.q_identity, want.k_identity, want.all_live)
            a, b = _entries(got), _entries(want)
            assert a.keys() == b.keys()
            assert all(torch.equal(a[x], b[x]) for x in a)
            assert got.masks.unique(dim=0).shape[0] == got.masks.shape[0]
            assert [(bk.band, bk.consecutive, bk.causal_diagonal, bk.rows.tolist()) for bk in got.buckets] == \
                [(bk.band, bk.consecutive, bk.causal_diagonal, bk.rows.tolist()) for bk in want.buckets]
    with pytest.raises(ValueError, match="multiple"):
        plan_build.coarsen_plan(fine, parts, qo, n, m, q_offset, 12, heads, CPU)
