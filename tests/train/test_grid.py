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


def test_a_cell_is_worked_by_one_process_at_a_time(tmp_path):
    """Two runs of one grid over one directory: the second skips the cell the first holds (it never
    empties or works it) and works the others; emptying a cell keeps the lock the runner holds."""
    import threading

    from tfamily.train.rundir import RunDirLocked
    cells = [(tmp_path / name, {"name": name}) for name in ("a", "b")]
    entered, leave, calls, logs = threading.Event(), threading.Event(), [], []

    def work(d):
        calls.append(d.name)
        (d / "progress").write_text("half")
        if d.name == "a" and len(calls) == 1:  # the first run is inside cell a
            entered.set()
            assert leave.wait(30)
        return {"cell": d.name}
    first = threading.Thread(target=grid.run_cells, args=(cells[:1], work))
    first.start()
    try:
        assert entered.wait(30)
        assert (tmp_path / "a" / grid.CELL_LOCK).is_file() and (tmp_path / "a" / "progress").is_file()
        second = grid.run_cells(cells, work, log=logs.append)
        assert calls == ["a", "b"] and (tmp_path / "a" / "progress").is_file()  # a was neither worked nor emptied
        assert second == [None, {"cell": "b"}] and any("a: skipped, in use by pid" in m for m in logs), logs
        with pytest.raises(RunDirLocked, match="is in use by pid"):
            grid.cell_lock(tmp_path / "a")
    finally:
        leave.set()
        first.join(30)
    assert grid.run_cells(cells, work) == [{"cell": "a"}, {"cell": "b"}] and calls == ["a", "b"]
    with grid.cell_lock(tmp_path / "c"):
        (tmp_path / "c" / "stale").write_text("x")
        grid.start(tmp_path / "c", {"name": "c"}, "new")
        assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [grid.CELL_LOCK, "plan.json"]
