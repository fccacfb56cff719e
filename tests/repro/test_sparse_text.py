"""The sparse-vs-dense text comparison: runs differ only in pattern (and kernel)."""
from __future__ import annotations

import argparse
import json

import pytest

from tfamily.repro import sparse_text


def _args(**kw):
    p = argparse.ArgumentParser()
    sparse_text.add_args(p)
    return p.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


def test_runs_share_everything_but_the_pattern(tmp_path):
    args = _args(seq_len=256)
    plan = sparse_text.runs(256, 32)
    assert plan["gpt"] is None and plan["sparse_transformer_strided"]["stride"] == 16
    cmds = {m: sparse_text.command(m, p, args, tmp_path / m) for m, p in plan.items()}
    shared = [c for c in cmds["gpt"] if "=" in c and not c.startswith("model.pattern")]
    for member, cmd in cmds.items():
        assert all(s in cmd for s in shared)
        if plan[member] is not None:
            assert f"model.pattern.params={json.dumps(plan[member])}" in cmd


@pytest.mark.slow
def test_two_step_comparison_runs(tmp_path, capsys):
    args = _args(steps=2, d_model=32, layers=1, batch_size=2, seq_len=64, block_size=16, out=tmp_path)
    args.json, args.members = True, ["gpt", "bigbird"]
    assert sparse_text.run(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["member"] for r in rows] == ["gpt", "bigbird"] and all(r["val_bpc"] > 0 for r in rows)
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    assert (tmp_path / "results.png").read_bytes()[:4] == b"\x89PNG"


def test_data_dir_is_passed_to_every_run(tmp_path):
    args = _args(data_dir=tmp_path / "data")
    cmd = sparse_text.command("gpt", None, args, tmp_path / "gpt")
    assert cmd[cmd.index("--data-dir") + 1] == str(tmp_path / "data")
    assert "--data-dir" not in sparse_text.command("gpt", None, _args(), tmp_path / "gpt")


def test_device_is_passed_to_every_run(tmp_path):
    assert "train.device=cuda:1" in sparse_text.command("gpt", None, _args(device="cuda:1"), tmp_path / "gpt")
    assert not any(c.startswith("train.device") for c in sparse_text.command("gpt", None, _args(), tmp_path / "g"))


def test_bar_chart_of_the_table(tmp_path):
    from tfamily.repro.plots import save_bars
    rows = [{"member": "gpt", "val_bpc": 2.1, "train_s": 30.0}, {"member": "bigbird", "val_bpc": 2.3, "train_s": 41.0}]
    save_bars(rows, "val_bpc", "bpc", tmp_path / "r.png", "t", note="train_s")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_time_budget_and_curves_reach_every_run(tmp_path):
    args = _args(time="10m", eval_every=50, eval_tokens=65536, corpus="kjv", seq_len=8192)
    cmd = sparse_text.command("longformer", sparse_text.runs(8192, 32)["longformer"], args, tmp_path / "l")
    assert cmd[cmd.index("--time") + 1] == "10m" and "--steps" not in cmd
    assert "train.eval_every=50" in cmd and "train.eval_tokens=65536" in cmd and "data.seq_len=8192" in cmd
    plain = sparse_text.command("gpt", None, _args(), tmp_path / "g")
    assert plain[plain.index("--steps") + 1] == "600" and "train.eval_every=null" in plain


def test_time_to_target_is_the_first_score_at_or_below_the_dense_final(tmp_path):
    rows = [{"member": "gpt", "val_bpc": 2.5, "steps": 40}, {"member": "longformer", "val_bpc": 2.2, "steps": 300},
            {"member": "bigbird", "val_bpc": 2.7, "steps": 200}]
    curves = [{"member": "gpt", "train_s": t, "val_bpc": b} for t, b in ((100, 3.0), (400, 2.6), (600, 2.5))]
    curves += [{"member": "longformer", "train_s": t, "val_bpc": b} for t, b in ((50, 2.9), (150, 2.5), (300, 2.2))]
    curves += [{"member": "bigbird", "train_s": t, "val_bpc": b} for t, b in ((80, 3.1), (500, 2.7))]
    assert sparse_text.time_to_target(rows, curves, None) == 2.5
    assert [r["time_to_target_s"] for r in rows] == [600, 150, None]
    assert sparse_text.time_to_target(rows, curves, 2.8) == 2.8
    assert [r["time_to_target_s"] for r in rows] == [400, 150, 500]
    sparse_text.save_target_curves(curves, rows, 2.8, tmp_path / "c.png", "t")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
