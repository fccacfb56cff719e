"""The one grid runner: shards, plans that refuse a changed cell, and what a later run does."""
from __future__ import annotations

import pytest

from tfamily.train import grid


def test_shards_cover_the_grid_once():
    cells = list(range(7))
    parts = [grid.shard(cells, f"{i}/3") for i in range(3)]
    assert sorted(sum(parts, [])) == cells and parts[1] == [1, 4] and grid.shard(cells, None) == cells
    for bad in ("3/3", "a/2", "1", "-1/2"):
        with pytest.raises(ValueError, match=f"--shard {bad}: give i/n with 0 <= i < n"):
            grid.parse_shard(bad)


def test_status_new_done_and_a_changed_plan(tmp_path):
    d, plan = tmp_path / "cell", {"lr": 1e-3, "steps": 4}
    assert grid.status(d, plan, lambda d: False) == ("new", None)
    (d / "stale").parent.mkdir(parents=True)
    (d / "stale").write_text("x")
    grid.start(d, plan, "new")  # nothing to resume: emptied, then planned
    assert sorted(p.name for p in d.iterdir()) == ["plan.json"]
    assert grid.status(d, plan, lambda d: True) == ("done", None)
    assert grid.status(d, {**plan, "steps": 8}, lambda d: False, may_change=("steps",)) == ("new", None)
    with pytest.raises(ValueError, match=r"was planned with other settings \(lr: saved 0.001, asked 0.003\)"):
        grid.status(d, {**plan, "lr": 3e-3}, lambda d: True)
    (d / "plan.json").write_text("{")
    with pytest.raises(ValueError, match="plan.json is not valid JSON"):
        grid.check_plan(d, plan)


def test_run_cells_writes_each_result_once_and_a_rerun_continues_after_a_failure(tmp_path):
    cells = [(tmp_path / name, {"name": name, "steps": 2}) for name in ("a", "b", "c")]
    calls = []

    def work(d):
        calls.append(d.name)
        if d.name == "b" and calls.count("b") == 1:
            raise RuntimeError("killed")  # the grid dies in its second cell
        return {"cell": d.name, "planned": grid.read_plan(d)["name"]}
    with pytest.raises(RuntimeError, match="killed"):
        grid.run_cells(cells, work)
    assert grid.run_cells(cells, work) == [{"cell": n, "planned": n} for n in "abc"]
    assert calls == ["a", "b", "b", "c"]  # a finished cell is never run again
    assert grid.run_cells(cells, work, shard="1/2") and calls == ["a", "b", "b", "c"]
    parts = [grid.run_cells([(tmp_path / "s" / d.name, p) for d, p in cells], work, shard=f"{i}/2") for i in (0, 1)]
    assert parts[0][1] is None and parts[1] == [{"cell": n, "planned": n} for n in "abc"]
    with pytest.raises(ValueError, match=r"planned with other settings \(steps: saved 2, asked 3\)"):
        grid.run_cells([(tmp_path / "c", {"name": "c", "steps": 3})], work)
