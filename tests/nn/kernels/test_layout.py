"""``block_size="auto"``: the pruned search over tile sizes picks what costing every candidate
picks, and skips the tiles a narrow pattern cannot use."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import layout
from tfamily.nn.kernels.layout import build_plan, split
from tfamily.nn.patterns.examples import examples

CPU = torch.device("cpu")


@pytest.mark.parametrize("engine", list(layout.ROW_COSTS))
@pytest.mark.parametrize("name", [n for n in examples(1024, toys=True) if n != "causal"])
def test_auto_stops_early_only_when_no_larger_tile_can_win(name, engine):
    # The pruned search picks what costing every candidate picks.
    pattern = examples(1024, toys=True)[name]
    sizes = layout.AUTO_SIZES[engine]
    for qo, parts in split(pattern):
        heads = (0, 1, 2, 3) if layout.parts_per_head(parts) else None
        for fold in (1, 2):
            full = {b: layout.plan_cost(build_plan(parts, qo, 1024, 1024, 0, b, heads, CPU), fold, engine)
                    for b in sizes}
            pruned = layout._auto_costs(parts, qo, 1024, 1024, 0, heads, CPU, fold, engine)
            assert min(pruned, key=pruned.get) == min(full, key=full.get)
            assert all(pruned[b] == full[b] for b in pruned)


def test_auto_skips_the_large_tiles_a_narrow_window_cannot_use():
    from tfamily.nn.patterns import SlidingWindow
    (qo, parts), = split(SlidingWindow(64))
    costs = layout._auto_costs(parts, qo, 4096, 4096, 0, None, CPU, 1, "fused")
    assert 256 not in costs and min(costs, key=costs.get) in (32, 64)


def test_cost_engine_names_the_table_of_the_kernel_and_dtype(monkeypatch):
    monkeypatch.setattr(layout, "_has_amx", lambda: True)
    assert layout.cost_engine(False, torch.bfloat16) == "tiles"
    assert layout.cost_engine(True, torch.float32) == "fused"
    assert layout.cost_engine(True, torch.float64) == "fused"
    assert layout.cost_engine(True, torch.bfloat16) == "fused_amx_bf16"
    monkeypatch.setattr(layout, "_has_amx", lambda: False)
    assert layout.cost_engine(True, torch.bfloat16) == "fused"


def test_bf16_on_amx_prefers_64_row_tiles_where_fp32_keeps_32():
    # The strided pattern's window (129 keys): 32-row tiles compute 160 keys per query, 64-row
    # ones 192; in fp32 the smaller waste wins, on AMX bf16 the cheaper products do (measured:
    # experiments/attention/block_ab_bf16_xeon/).
    from tfamily.nn.patterns import SlidingWindow
    (qo, parts), = split(SlidingWindow(129))
    pick = {e: min(c, key=c.get) for e in ("fused", "fused_amx_bf16")
            for c in [layout._auto_costs(parts, qo, 4096, 4096, 0, None, CPU, 1, e)]}
    assert pick == {"fused": 32, "fused_amx_bf16": 64}
