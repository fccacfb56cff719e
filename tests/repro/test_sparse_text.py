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


def test_bar_chart_of_the_table(tmp_path):
    from tfamily.repro.plots import save_bars
    rows = [{"member": "gpt", "val_bpc": 2.1, "train_s": 30.0}, {"member": "bigbird", "val_bpc": 2.3, "train_s": 41.0}]
    save_bars(rows, "val_bpc", "bpc", tmp_path / "r.png", "t", note="train_s")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
