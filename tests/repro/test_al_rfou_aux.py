"""The Al-Rfou ablation: runs share everything but the objective, and a tiny run writes its
table, curves and plot."""
from __future__ import annotations

import argparse
import json

import pytest

from tfamily.repro import REPROS, al_rfou_aux
from tfamily.train.config import load


def _args(*argv):
    p = argparse.ArgumentParser()
    al_rfou_aux.add_args(p)
    return p.parse_args(list(argv))


def test_runs_differ_only_in_the_objective(tmp_path):
    args = _args()
    assert REPROS["al-rfou-aux"] == "tfamily.repro.al_rfou_aux"
    plans = {r: al_rfou_aux.overrides(r, args, tmp_path) for r in al_rfou_aux.RUNS}
    drop = ("name", "model.objective", "train.out")
    shared = {k: v for k, v in plans["all"].items() if k not in drop}
    for run, o in plans.items():
        assert {k: v for k, v in o.items() if k not in drop} == shared
        cfg = load(None, o)
        assert cfg.train.time_budget == 300.0 and cfg.train.max_steps is None  # equal wall time by default
    assert args.layers >= 12
    off = {r: plans[r]["model.objective"]["params"] for r in ("no_all_positions", "no_intermediate",
                                                              "no_multiple_targets")}
    assert off == {"no_all_positions": {"all_positions": False}, "no_intermediate": {"intermediate": False},
                   "no_multiple_targets": {"multiple_targets": False}}
    steps = al_rfou_aux.overrides("all", _args("--steps", "50"), tmp_path)
    assert steps["train.max_steps"] == 50 and steps["train.time_budget"] is None


def test_bad_budget_is_refused():
    with pytest.raises(ValueError, match="--time must be > 0"):
        al_rfou_aux.run(_args("--time", "0"))
    with pytest.raises(ValueError, match="--layers must be >= 2"):
        al_rfou_aux.run(_args("--layers", "1"))


@pytest.mark.slow
def test_tiny_ablation_writes_table_curves_and_plot(tmp_path, capsys):
    args = _args("--steps", "4", "--layers", "3", "--d-model", "16", "--heads", "2", "--seq-len", "16",
                 "--batch-size", "2", "--warmup", "1", "--curve-every", "2", "--curve-chars", "64",
                 "--eval-chars", "256", "--runs", "all", "no_intermediate", "--json", "--out", str(tmp_path))
    assert al_rfou_aux.run(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in rows] == ["all", "no_intermediate"] and all(r["steps"] == 4 for r in rows)
    assert all(r["val_chars"] == 256 and r["val_bpc"] > 0 for r in rows)
    curve = json.loads((tmp_path / "curves.json").read_text())
    assert [c["step"] for c in curve if c["run"] == "all"] == [2, 4]
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "results.csv").read_text().startswith("run,val_bpc")
