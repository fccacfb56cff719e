"""`tfamily arena` end to end at tiny size: the table, skipping finished cells, resuming a killed
cell, shards that merge into the unsharded table, and one-line refusals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.arena import grid, table


TINY = ["--members", "gpt", "longformer", "--tasks", "listops", "--steps", "4", "--length", "listops=24",
        "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "4", "--eval-examples", "16",
        "--ckpt-every", "2", "--speed-rounds", "0"]
SAME = ("task", "member", "seed", "params", "steps", "test_acc", "val_acc", "val_loss", "train_loss")


def kill_when_flagged(proc: subprocess.Popen, flag: Path, timeout: float = 150) -> None:
    """SIGKILL ``proc`` once it has written ``flag`` (tests/hooked_cli.py's --halt)."""
    deadline = time.monotonic() + timeout
    try:
        while not flag.exists():
            assert proc.poll() is None, f"exited ({proc.returncode}) before the halt: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "the arena did not reach the halt in time"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _arena(out, *extra) -> int:
    return cli.main(["arena", *TINY, "--out", str(out), *extra])


def _same(rows) -> list[tuple]:
    return [tuple(r[k] for k in SAME) for r in rows]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("arena")
    assert _arena(out) == 0
    return out


def test_tiny_arena_writes_the_leaderboard(baseline):
    board = json.loads((baseline / "leaderboard.json").read_text())
    assert sorted((r["task"], r["member"], r["steps"]) for r in board) == [("listops", "gpt", 4),
                                                                          ("listops", "longformer", 4)]
    assert all(0.0 <= r["test_acc"] <= 1.0 and r["tokens_per_s"] > 0 for r in board)
    assert [r["test_acc"] for r in board] == sorted((r["test_acc"] for r in board), reverse=True)  # best first
    page = (baseline / "leaderboard.md").read_text()
    assert "### listops (length 24, 1 seed; test accuracy" in page and "| gpt |" in page and "| majority class |" in page
    assert " ± " not in page and "bits per byte" not in page  # one seed: no spread; classification: no bpc
    assert (baseline / "leaderboard.png").stat().st_size > 0 and (baseline / "cells.csv").exists()
    for member in ("gpt", "longformer"):  # each cell is a normal run directory of the shared loop
        run = baseline / "listops" / f"{member}-s0"
        assert json.loads((run / "result.json").read_text())["steps"] == 4
        assert (run / "config.yaml").exists() and (run / "checkpoints").is_dir()


def test_second_run_skips_finished_cells(baseline, capsys):
    runs = [baseline / "listops" / f"{m}-s0" for m in ("gpt", "longformer")]
    before = {p: (p / "result.json").stat().st_mtime_ns for p in runs}
    assert _arena(baseline) == 0
    assert capsys.readouterr().err.count(": skipped,") == 2
    assert {p: (p / "result.json").stat().st_mtime_ns for p in runs} == before


def test_shards_cover_the_grid_once_and_merge_to_the_same_table(baseline, tmp_path):
    a, b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    assert _arena(a, "--shard", "0/2") == 0 and _arena(b, "--shard", "1/2") == 0
    assert [p.name for p in (a / "listops").iterdir()] == ["gpt-s0"]
    assert [p.name for p in (b / "listops").iterdir()] == ["longformer-s0"]
    assert cli.main(["arena", "merge", str(a), str(b), "--out", str(merged)]) == 0
    cells = json.loads((merged / "cells.json").read_text())
    assert _same(cells) == _same(table.collect([baseline]))
    with pytest.raises(ValueError, match="is in both"):
        table.collect([a, a.parent / "a"])


def test_killed_cell_resumes_where_it_stopped(baseline, tmp_path):
    out, flag = tmp_path / "out", tmp_path / "halted"
    hooked = [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), "--halt", "step:3", str(flag), "--"]
    proc = subprocess.Popen([*hooked, "arena", *TINY, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    kill_when_flagged(proc, flag)
    first = out / "listops" / "gpt-s0"
    assert not (first / "cell.json").exists() and (first / "checkpoints" / "step-00000002").is_dir()
    assert _arena(out) == 0
    cells = table.collect([out])
    assert [c["resumed"] for c in cells] == [True, False]
    assert _same(cells) == _same(table.collect([baseline]))  # the loop's resume is exact


@pytest.mark.parametrize("argv, message", [
    (["--members", "gtp"], "unknown member 'gtp'; did you mean 'gpt'?"),
    (["--tasks", "listop"], "unknown arena task 'listop'; did you mean 'listops'?"),
    (["--shard", "3/2"], "--shard 3/2: give i/n with 0 <= i < n"),
    (["--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["--tasks", "mnist", "--length", "mnist=5"], "--length mnist=5 must divide 28"),
    (["--members", "transformer_xl", "--as-papers"], "member transformer_xl cannot be an arena classifier"),
    (["--members", "image_transformer_1d"], "member image_transformer_1d cannot be an arena classifier (its bidir"),
    (["--members", "gpt:encoder"], "member 'gpt:encoder': the only variant is gpt:causal"),
    (["--tasks", "pathfinder", "--length", "pathfinder=4"], "--length pathfinder=4 is the image side"),
])
def test_bad_arguments_are_refused_in_one_line(argv, message, tmp_path, capsys):
    assert cli.main(["arena", *argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x").exists()


def test_a_cell_planned_otherwise_is_refused(baseline):
    with pytest.raises(ValueError, match=r"was planned with other settings \(steps: saved 4, asked 6\)"):
        grid.run_cell(grid.Cell("listops", "gpt", 0), grid.Settings(steps=6, lengths={"listops": 24}, d_model=16,
                      n_layers=1, n_heads=2, batch_size=4, eval_examples=16), baseline, d_ff=64)


def test_members_run_as_bidirectional_encoders_unless_causal():
    from tfamily.build import pattern
    from tfamily.train.resolve import make_spec
    s = grid.Settings(steps=2, lengths={"listops": 64}, d_model=16, n_layers=2, n_heads=2)
    for label, causal in (("longformer", False), ("longformer:causal", True), ("bigbird", False), ("gpt", False)):
        spec, _ = make_spec(grid.config(grid.Cell("listops", label, 0), s, Path("."), 10), 16, 64)
        assert all(pattern(spec, i).causal == causal for i in range(2)), label
    assert grid.Cell("listops", "gpt:causal", 1).dir("o") == Path("o/listops/gpt.causal-s1")
    assert grid.Cell("listops", "gpt", 1, 0.003).dir("o") == Path("o/listops/gpt-lr0.003-s1")


def test_d_ff_brings_every_member_within_ten_percent_of_the_first():
    s = grid.Settings(steps=2, lengths={"listops": 64}, d_model=32, n_layers=2, n_heads=2)
    cells = grid.grid(["gpt", "reformer", "longformer"], ["listops"], 1)
    d_ff, off = grid.match_d_ff(cells, s)
    assert off == {}
    counts = {m: grid.params(grid.Cell("listops", m, 0), s, 16, 10, d_ff[("listops", m)])
              for m in ("gpt", "reformer")}
    assert d_ff[("listops", "gpt")] == 128 and d_ff[("listops", "reformer")] > 128  # shared QK, no learned positions
    assert abs(counts["reformer"] - counts["gpt"]) <= 0.1 * counts["gpt"]
    assert all(v is None for v in grid.match_d_ff(cells, grid.Settings(match_params=False))[0].values())


def test_a_sweep_reports_the_learning_rate_best_on_validation():
    def cell(lr, seed, val, test):
        return {"task": "t", "member": "m", "seed": seed, "lr": lr, "length": 8, "params": 10, "d_ff": 4, "steps": 2,
                "test_acc": test, "val_acc": val, "train_s": 1.0, "tokens_per_s": 5.0, "peak_mb": 1.0}
    rows = table.summarize([cell(1e-3, 0, 0.2, 0.9), cell(1e-3, 1, 0.3, 0.9), cell(3e-3, 0, 0.5, 0.1),
                            cell(3e-3, 1, 0.4, 0.3)])
    assert len(rows) == 1 and rows[0]["lr"] == 3e-3 and rows[0]["lrs"] == 2 and rows[0]["sweep_s"] == 4.0
    assert abs(rows[0]["test_acc"] - 0.2) < 1e-9 and "(best of 2)" in table.markdown(rows)


def test_pathfinder_and_matching_with_a_sweep_end_to_end(tmp_path):
    out = tmp_path / "pm"
    argv = ["arena", "--members", "gpt", "bigbird:causal", "--tasks", "pathfinder", "match", "--length",
            "pathfinder=8", "match=16", "--steps", "2", "--lr", "1e-3", "3e-3", "--d-model", "16", "--layers", "1",
            "--heads", "2", "--batch-size", "4", "--eval-examples", "8", "--out", str(out)]
    assert cli.main(argv) == 0
    board = json.loads((out / "leaderboard.json").read_text())
    assert sorted((r["task"], r["member"], r["lrs"]) for r in board) == [
        ("match", "bigbird:causal", 2), ("match", "gpt", 2), ("pathfinder", "bigbird:causal", 2),
        ("pathfinder", "gpt", 2)]
    assert (out / "match" / "gpt-lr0.003-s0" / "cell.json").exists()
    assert json.loads((out / "match" / "gpt-lr0.001-s0" / "plan.json").read_text())["lr"] == 1e-3


def test_a_cell_held_by_another_run_is_skipped_not_trained(tmp_path, capsys):
    """Two arena runs over one directory: the cell one holds is left to it; the other cells train."""
    from tfamily.train import grid as runner
    out = tmp_path / "out"
    held = grid.Cell("listops", "gpt", 0).dir(out)
    held.mkdir(parents=True)
    (held / "train.csv").write_text("step,loss\n1,2.0\n")  # the holder's progress: never emptied by the other run
    with runner.cell_lock(held):
        assert _arena(out) == 0
        err = capsys.readouterr().err
        assert "listops gpt seed 0: skipped, in use by pid" in err and "cell(s) to train, about" in err, err
        assert sorted(p.name for p in held.iterdir()) == [runner.CELL_LOCK, "train.csv"]
        assert (out / "listops" / "longformer-s0" / "cell.json").is_file()
        row, holder = grid.run_cell(grid.Cell("listops", "gpt", 0), grid.Settings(), out)
        assert row is None and holder.startswith("pid ")
    assert "1 cell(s) of the grid not finished" in err


def test_a_learning_rate_sweep_spends_its_share_of_the_flops_budget(tmp_path):
    from tfamily.arena import tasks
    s = grid.Settings(steps=None, lengths={"listops": 24}, d_model=16, n_layers=1, n_heads=2, batch_size=4)
    task = tasks.make("listops", 24, batch_size=4, seed=0, eval_examples=1)
    per_step = grid.step_flops(grid.Cell("listops", "gpt", 0), s, task, 64)
    budget = 5.5 * per_step
    argv = [a for a in TINY if a != "longformer"]
    argv = argv[:argv.index("--steps")] + argv[argv.index("--steps") + 2:]
    assert cli.main(["arena", *argv, "--lr", "1e-3", "3e-3", "--flops", str(budget), "--out", str(tmp_path)]) == 0
    cells = table.collect([tmp_path])
    assert [(c["lr"], c["steps"]) for c in cells] == [(1e-3, 2), (3e-3, 2)]  # half the budget each: 2 steps
    assert sum(c["train_flops"] for c in cells) <= budget
    board = json.loads((tmp_path / "leaderboard.json").read_text())
    assert board[0]["sweep_flops"] == sum(c["train_flops"] for c in cells) and board[0]["lrs"] == 2
    assert json.loads((cells and tmp_path / "listops" / "gpt-lr0.001-s0" / "plan.json").read_text())["flops"] == budget / 2


def test_a_parameter_count_past_ten_percent_is_trained_marked_when_allowed(tmp_path, capsys):
    argv = ["arena", "--members", "llama", "gpt", "--as-papers", "--tasks", "listops", "--length", "listops=256", "--steps", "2",
            "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "4", "--eval-examples", "8",
            "--speed-rounds", "0", "--out", str(tmp_path)]
    # refused without the flag: tests/test_catalogue_grids.py
    assert cli.main([*argv, "--allow-param-mismatch"]) == 0
    err = capsys.readouterr().err
    assert "gpt has" in err and "† params (d_ff " in err  # said when it starts, marked on its line
    board = {r["member"]: r for r in json.loads((tmp_path / "leaderboard.json").read_text())}
    assert board["llama"]["params_off"] is None and board["gpt"]["params_off"] > 0.3
    page = (tmp_path / "leaderboard.md").read_text()
    assert f"{board['gpt']['params']:,}†" in page and "† parameters more than 10%" in page  # the report: test_table


def _cell_spec(member: str, base: str):
    from pathlib import Path as _P

    from tfamily.arena import grid as g
    from tfamily.train.resolve import make_spec
    s = g.Settings(d_model=32, n_layers=2, n_heads=2, base=base)
    cell = g.Cell("listops", member, 0)
    return make_spec(g.config(cell, s, _P("."), 10), 32, 128)[0]


def test_by_default_a_member_brings_only_its_attention_to_gpts_recipe():
    from tfamily import members
    gpt = _cell_spec("gpt", "attention")
    for name in ("longformer", "sparse_transformer_fixed", "reformer"):
        spec = _cell_spec(name, "attention")
        differ = {k.split(".")[0] for k, *_ in members.diff_specs(spec, gpt)}
        assert differ <= {"pattern", "kernel", "heads", "depth"}, (name, differ)
        assert spec.pattern.name == members.get(name)().pattern.name or name == "reformer"
    papers = _cell_spec("sparse_transformer_fixed", "papers")
    assert papers.ff.activation == "gelu_sigmoid" and papers.dropout == 0.4  # its paper's recipe
    assert _cell_spec("sparse_transformer_fixed", "attention").ff.activation == "gelu_tanh"


def test_a_member_without_decoder_attention_is_refused_unless_as_papers(tmp_path, capsys):
    argv = ["arena", "--members", "gpt", "bert", "--tasks", "listops", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bert's base is the encoder recipe" in err and "--as-papers" in err
