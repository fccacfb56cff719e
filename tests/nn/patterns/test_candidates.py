"""Block candidates are a superset of the tiles a pattern touches (so plans are exact),
and the sequence orders make the factorized patterns sparse in tiles."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels.layout import build_plan, split
from tfamily.nn.patterns import PerHead, StridedColumns, FixedSummary, dense_mask
from tfamily.nn.patterns.combine import candidates
from tfamily.nn.patterns.examples import examples


def _leaves(pattern):
    subs = pattern.patterns if isinstance(pattern, PerHead) else [pattern]
    return [part for sub in subs for _, parts in split(sub) for part in parts] + list(subs)


def _sorted(n, order, offset=0):
    pos = torch.arange(offset, offset + n)
    return pos if order is None else pos[torch.sort(order.key(pos), stable=True).indices]


@pytest.mark.parametrize("name", list(examples(80, toys=True)))
@pytest.mark.parametrize("block", [5, 16])
def test_candidates_cover_every_allowed_tile(name, block):
    heads = (0, 1, 2)
    for p in _leaves(examples(80, toys=True)[name]):
        qpos = _sorted(80, getattr(p, "query_order", None), offset=20)
        kpos = _sorted(100, getattr(p, "key_order", None))
        h = torch.tensor(heads).view(-1, 1, 1)
        truth = p.mask_mod(torch.zeros((), dtype=torch.long), h, qpos.view(1, -1, 1), kpos.view(1, 1, -1))
        truth = truth.expand(3, 80, 100)
        pad_q, pad_k = -80 % block, -100 % block
        qt = torch.cat([qpos, qpos[-1:].expand(pad_q)]).view(-1, block)
        kt = torch.cat([kpos, kpos[-1:].expand(pad_k)]).view(-1, block)
        truth = torch.nn.functional.pad(truth, (0, pad_k, 0, pad_q))
        tiles = truth.view(3, qt.shape[0], block, kt.shape[0], block).any(2).any(-1)
        cand = candidates(p, qt, kt, heads).expand_as(tiles)
        assert not (tiles & ~cand).any(), p


@pytest.mark.parametrize("pattern", [StridedColumns(16), FixedSummary(16, 4)])
def test_reordering_makes_the_far_parts_sparse_in_tiles(pattern):
    # Natural order: every causal tile holds a column or a summary (~ dense causal work);
    # in the pattern's order the work is within 2.5x of the allowed pairs.
    n, block = 256, 16
    allowed = int(dense_mask(pattern, n, n).sum())
    plan = build_plan((pattern,), getattr(pattern, "query_order", None), n, n, 0, block, None, "cpu")
    work = sum(bk.scores for bk in plan.buckets)
    assert work <= 2.5 * allowed
    natural = build_plan((_Natural(pattern),), None, n, n, 0, block, None, "cpu")
    assert sum(bk.scores for bk in natural.buckets) >= 4 * work


class _Natural:
    """The same predicate with no preferred order."""

    def __init__(self, p):
        self.p, self.causal, self.name = p, p.causal, p.name

    def mask_mod(self, b, h, q, kv):
        return self.p.mask_mod(b, h, q, kv)
