"""The leaderboard (``arena/table.py``): which cells may share a table, and how it prints: best
first, one table per task with its metric's columns, the majority-class line, no spread for one
seed, the parameter mark, learning rates that print alike kept apart."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.arena import grid, table

PLAN = {"task": "listops", "member": "gpt", "seed": 0, "lr": 1e-3, "length": 24, "d_model": 16, "n_layers": 1,
        "n_heads": 2, "batch_size": 4, "steps": 4, "time": None, "flops": None, "precision": "fp32", "d_ff": 64,
        "threads": 1, "eval_examples": 16}


def cell(out: Path, **change) -> Path:
    """A finished cell's directory (its plan.json and cell.json) under arena directory ``out``."""
    plan = {**PLAN, **change}
    d = grid.Cell(plan["task"], plan["member"], plan["seed"], plan["lr"]).dir(out)
    d.mkdir(parents=True)
    (d / "plan.json").write_text(json.dumps(plan))
    row = {"task": plan["task"], "member": plan["member"], "seed": plan["seed"], "lr": plan["lr"], "length": plan["length"],
           "params": 100, "d_ff": 64, "steps": plan["steps"], "metric": "acc", "test_acc": 0.5, "val_acc": 0.5,
           "train_s": 1.0, "train_flops": 10.0, "tokens_per_s": 5.0, "peak_mb": 1.0, "majority_acc": 0.25}
    (d / "cell.json").write_text(json.dumps(row))
    return d


def test_seeds_planned_differently_are_not_averaged(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    cell(a, seed=0)
    cell(b, seed=1, steps=6, d_ff=80)
    with pytest.raises(ValueError, match=r"the seeds of listops gpt at lr 0.001 were planned differently: d_ff "
                                         r"\(64 in .*a/listops/gpt-lr0.001-s0, 80 in .*b/listops/gpt-lr0.001-s1\); "
                                         r"--steps \(4 in .*, 6 in .*\); their mean would mix settings"):
        table.collect([a, b])
    assert cli.main(["arena", "merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "d_ff" in err and "--steps" in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("change, words", [
    ({"length": 32}, "--length (24 in"), ({"d_model": 32}, "--d-model (16 in"), ({"n_layers": 2}, "--layers"),
    ({"n_heads": 4}, "--heads"), ({"batch_size": 8}, "--batch-size"), ({"flops": 1e9}, "--flops (null in"),
    ({"precision": "bf16"}, "--precision"), ({"base": "gpt"}, "the base recipe"),
])
def test_members_of_a_task_at_other_settings_are_not_one_table(change, words, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    cell(a, member="gpt")
    cell(b, member="longformer", **change)
    assert cli.main(["arena", "merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the cells of listops differ in " + words in err and "one setting" in err, err
    cell(b, member="gpt", seed=1, task="mnist", length=14)  # another task may have its own settings
    cell(a, member="longformer", task="mnist", length=7)
    with pytest.raises(ValueError, match="the cells of mnist differ in --length"):
        table.collect([a, b], keep=lambda r: r["task"] == "mnist")
    assert table.collect([a, b], keep=lambda r: r["member"] == "gpt")  # what a run of one grid keeps is alike


def test_learning_rates_that_print_alike_stay_apart(tmp_path):
    close = 1.0000001e-3
    assert grid.lr_text(1e-3) == "0.001" and grid.lr_text(close) != "0.001" and grid.lr_text(3e-4) == "0.0003"
    assert grid.Cell("t", "m", 0, 1e-3).dir("o") != grid.Cell("t", "m", 0, close).dir("o")
    assert [c.lr for c in grid.grid(["gpt"], ["listops"], 1, [1e-3, close])] == [1e-3, close]
    cell(tmp_path, lr=1e-3)
    cell(tmp_path, lr=close)
    rows = table.summarize(table.collect([tmp_path]))
    assert len(rows) == 1 and rows[0]["lrs"] == 2 and "(best of 2)" in table.markdown(rows)


def _row(member, acc, seeds=1, **kw):
    return {"task": "listops", "member": member, "seed": 0, "lr": 1e-3, "length": 24, "params": 100, "d_ff": 64,
            "steps": 4, "metric": "acc", "test_acc": acc, "val_acc": acc, "train_s": 1.0, "train_flops": 2e12,
            "tokens_per_s": 5.0, "peak_mb": 1.0, "majority_acc": 0.25, **kw}


def test_the_leaderboard_is_best_first_per_task_with_its_metric_only():
    cells = [_row("gpt", 0.3), _row("bigbird", 0.6), _row("reformer", 0.2, seed=0), _row("reformer", 0.4, seed=1),
             {**_row("gpt", None, metric="bpc", test_bpc=1.9, val_bpc=2.0), "task": "lm", "length": 64},
             {**_row("bigbird", None, metric="bpc", test_bpc=1.5, val_bpc=1.6), "task": "lm", "length": 64,
              "majority_acc": None}]
    rows = table.summarize(cells)
    assert [(r["task"], r["member"]) for r in rows] == [("listops", "bigbird"), ("listops", "reformer"),
                                                         ("listops", "gpt"), ("lm", "bigbird"), ("lm", "gpt")]
    assert rows[0]["test_acc_std"] is None and rows[1]["test_acc_std"] > 0  # one seed: no spread
    page = table.markdown(rows)
    listops, lm = page.split("### lm")
    assert "### listops (length 24, 1/2 seeds; test accuracy, higher is better)" in listops
    assert "| bigbird | 60.0 | 60.0 |" in listops and "| reformer | 30.0 ± 14.1 |" in listops
    assert "± 0.0" not in page and "bpc" not in listops and "bits per byte" not in listops
    assert "| majority class | 25.0 |" in listops
    assert "test bits per byte, lower is better" in lm and "| bigbird | 1.500 | 1.600 |" in lm
    assert "accuracy" not in lm.replace("test bits per byte", "") and "majority class" not in lm
    widest = max(len(line) for line in page.splitlines() if line.startswith("|"))
    assert widest < 160, widest  # fits a page: no task, length or metric columns repeated per row


def test_a_parameter_count_allowed_past_ten_percent_is_marked(tmp_path):
    rows = table.summarize([_row("gpt", 0.3), _row("llama", 0.4, params=166, params_off=0.66)])
    page = table.markdown(rows)
    assert "| 166† (64) |" in page and "| 100 (64) |" in page
    assert "† parameters more than 10% from the first member's (listops llama +66%): trained with " \
           "--allow-param-mismatch" in page
    from tfamily.arena import report
    assert "166†" in report.leaderboard(rows) and "166†" in report.html_table(
        [_row("llama", 0.4, params=166, params_off=0.66)], report.cell_fields("acc"))
