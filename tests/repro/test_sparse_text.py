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
    args = _args(steps=2, d_model=32, layers=1, batch_size=2, seq_len=64, block_size=16, out=tmp_path,
                 json="")
    args.json, args.members = True, ["gpt", "bigbird"]
    assert sparse_text.run(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["member"] for r in rows] == ["gpt", "bigbird"] and all(r["val_bpc"] > 0 for r in rows)


def test_data_dir_is_passed_to_every_run(tmp_path):
    args = _args(data_dir=tmp_path / "data")
    cmd = sparse_text.command("gpt", None, args, tmp_path / "gpt")
    assert cmd[cmd.index("--data-dir") + 1] == str(tmp_path / "data")
    assert "--data-dir" not in sparse_text.command("gpt", None, _args(), tmp_path / "gpt")
