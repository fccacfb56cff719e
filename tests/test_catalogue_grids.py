"""The bad-input catalogue, grids: a member whose parameters cannot be matched, a sweep's share of a
budget too small for one step, and `arena merge` of cells that may not share a table. Each row: one
line naming the value and the fix, exit status 2, before any training."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

TINY = "--tasks listops --d-model 16 --layers 1 --heads 2 --batch-size 4 --eval-examples 8"
PLAN = {"task": "listops", "member": "gpt", "seed": 0, "lr": 0.001, "length": 24, "d_model": 16, "n_layers": 1,
        "n_heads": 2, "batch_size": 4, "steps": 4, "time": None, "flops": None, "precision": "fp32", "d_ff": 64}


def _cell(out: Path, **change) -> None:
    plan = {**PLAN, **change}
    d = out / plan["task"] / f"{plan['member']}-s{plan['seed']}"
    d.mkdir(parents=True)
    (d / "plan.json").write_text(json.dumps(plan))
    (d / "cell.json").write_text(json.dumps({k: plan[k] for k in ("task", "member", "seed", "lr", "length", "steps")}
                                            | {"params": 10, "test_acc": 0.5, "val_acc": 0.5, "train_s": 1.0}))


def _seeds_apart(d: Path) -> None:
    _cell(d / "a")
    _cell(d / "b", seed=1, steps=6)


def _lengths_apart(d: Path) -> None:
    _cell(d / "a")
    _cell(d / "b", member="longformer", length=32)


ROWS = [
    R(f"arena --members llama gpt --as-papers {TINY} --length listops=256",
      ["listops: gpt has", "from llama's", "more than 10% apart", "--allow-param-mismatch", "--no-match-params"]),
    R(f"arena --members gpt {TINY} --length listops=24 --flops 1000 --lr 1e-3 2e-3",
      ["--flops 500 (1e+03 over 2 learning rates)", "cannot pay for one training step of gpt", "--flops of at least"]),
    R(f"arena --members gpt {TINY} --length listops=24 --time 0.001 --lr 1e-3 2e-3",
      ["--time 0.001 (0.0005 s for each of 2 learning rates)", "cannot fit one evaluation"]),
    R("arena merge {d}/a {d}/b --out {d}/m", ["the seeds of listops gpt at lr 0.001 were planned differently",
                                              "--steps (4 in {d}/a/listops/gpt-s0, 6 in {d}/b/listops/gpt-s1)",
                                              "merge only the cells of one grid"]),
    R("arena merge {d}/a {d}/b --out {d}/m", ["the cells of listops differ in --length (24 in {d}/a", "32 in {d}/b",
                                              "merge the directories of grids run alike"]),
]
SETUP = [None, None, None, _seeds_apart, _lengths_apart]


@pytest.mark.parametrize("row, setup", list(zip(ROWS, SETUP)), ids=[f"{i}: {r.id}" for i, r in enumerate(ROWS)])
def test_grids_refuse_in_one_line_naming_the_value_and_the_fix(row, setup, tmp_path, capsys):
    d = str(tmp_path)
    if setup:
        setup(tmp_path)
    argv = [a.replace("{d}", d) for a in row.argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    last = run_row(row, argv, capsys)
    for w in row.words:
        assert w.replace("{d}", d) in last, (w, last)
    assert not (tmp_path / "o").exists() and not (tmp_path / "m").exists()
