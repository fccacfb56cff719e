"""``block_size="auto"``: the pruned search over tile sizes picks what costing every candidate
picks, and skips the tiles a narrow pattern cannot use."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import layout
from tfamily.nn.kernels.layout import build_plan, split
from tfamily.nn.patterns.examples import examples

CPU = torch.device("cpu")


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name", [n for n in examples(1024, toys=True) if n != "causal"])
def test_auto_stops_early_only_when_no_larger_tile_can_win(name, compiled):
    # The pruned search picks what costing every candidate picks.
    pattern = examples(1024, toys=True)[name]
    sizes = layout.AUTO_BLOCKS_COMPILED if compiled else layout.AUTO_BLOCKS
    for qo, parts in split(pattern):
        heads = (0, 1, 2, 3) if layout.parts_per_head(parts) else None
        for fold in (1, 2):
            full = {b: layout.plan_cost(build_plan(parts, qo, 1024, 1024, 0, b, heads, CPU), fold, compiled)
                    for b in sizes}
            pruned = layout._auto_costs(parts, qo, 1024, 1024, 0, heads, CPU, fold, compiled)
            assert min(pruned, key=pruned.get) == min(full, key=full.get)
            assert all(pruned[b] == full[b] for b in pruned)


def test_auto_skips_the_large_tiles_a_narrow_window_cannot_use():
    from tfamily.nn.patterns import SlidingWindow
    (qo, parts), = split(SlidingWindow(64))
    costs = layout._auto_costs(parts, qo, 4096, 4096, 0, None, CPU, 1, True)
    assert 256 not in costs and min(costs, key=costs.get) in (32, 64)
