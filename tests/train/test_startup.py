"""The start of a run: size presets, the first line, threads decided once, and the run
directory locked before anything else touches it (two runs racing for one --out)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tfamily import cli, members
from tfamily.spec import Spec
from tfamily.train import autotune, checkpoint, fit, loop, presets, resolve, startup
from tfamily.train.config import check_resume, load

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=32", "data.seq_len=32", "train.batch_size=8", "train.eval_tokens=2048",
        "train.progress=false", "train.tensorboard=false", "train.warmup=2", "train.precision=fp32",
        "train.ckpt_every=null", "train.threads=1"]


# -- size presets ----------------------------------------------------------------------------------
def test_auto_size_is_small_on_a_cpu_and_paper_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = load(None, {}, base={"size": "auto"})
    assert (cpu.size, cpu.data.seq_len, cpu.train.batch_size) == ("small", 128, 16)
    cuda = load(None, {"train.device": "cuda"}, base={"size": "auto"})
    assert (cuda.size, cuda.data.seq_len, cuda.train.batch_size) == ("paper", 256, 32)
    assert load(None, {}).size == "paper"  # the Python default: the member as published
    with pytest.raises(ValueError, match="size='huge' is not valid; use --size small, --size paper"):
        load(None, {"size": "huge"})


def test_what_the_user_sets_wins_over_the_preset_key_by_key():
    cfg = load(None, {"size": "small", "member": "transformer_xl", "data.seq_len": 64, "model.d_model": 256})
    assert cfg.data.seq_len == 64 and cfg.train.batch_size == 16
    d = resolve.member_dict(cfg)
    assert d["d_model"] == 256 and d["depth"]["n_layers"] == 4 and d["state"]["mem_len"] == 128
    spec = Spec.from_dict({**d, "vocab_size": 65})
    assert spec.d_ff == 4 * 256 and spec.d_head == 256 // 4  # ratios follow the width set


@pytest.mark.parametrize("name", sorted(members.REGISTRY))
def test_every_member_is_valid_and_cheaper_at_size_small(name):
    paper = members.get(name)().to_dict()
    small = Spec.from_dict(presets.member_dict(name, "small", paper))
    flops = [startup.flops_per_unit(s, 0, 128) for s in (small, Spec.from_dict(paper))]
    assert small.model == paper["model"] and small.depth.name == paper["depth"]["name"]  # same choices
    assert flops[0] <= flops[1] / (1 if name == "rnn_lm" else 4), flops  # the Elman RNN is small already


def test_a_resumed_run_keeps_its_size():
    meta = {"config": {"size": "small", "train": {"max_steps": 10}}, "step": 2}
    with pytest.raises(ValueError, match="--resume continues the run at its size 'small', not 'paper'"):
        check_resume(meta, {"size": "paper"})
    check_resume(meta, {"size": "small"})
    check_resume({"config": {"train": {"max_steps": 10}}, "step": 2}, {"size": "paper"})  # older runs: paper


# -- the first line and threads --------------------------------------------------------------------
def test_the_first_line_names_the_run_and_its_estimate(tmp_path, capsys):
    assert cli.main(["train", *TINY, "--steps", "10", "--out", str(tmp_path / "r"), "--json"]) == 0
    lines = capsys.readouterr().err.splitlines()
    first = lines[0]
    for field in ("gpt (small)", "M parameters", "256 tokens per step", "cpu (", "fp32", "1 thread",
                  "per 100 steps", "to the end (step 10)"):
        assert field in first, (field, first)
    assert any(line.startswith("measured over 10 steps:") and "per 100 steps" in line for line in lines)


def test_auto_threads_are_decided_once_and_kept_on_resume(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    calls = []

    def rates(counts, *a, **k):  # one thread timed faster
        calls.append(list(counts))
        return {n: 2.0e9 if n == 1 else 1.0e9 for n in counts}
    monkeypatch.setattr(autotune, "matmul_rates", rates)
    overrides = [*(t for t in TINY if not t.startswith("train.threads")), "train.threads=auto"]
    try:
        torch.set_num_threads(2)
        first = loop.Trainer(load(None, [*overrides, "train.max_steps=2", f"train.out={tmp_path / 'r'}"]))
        assert calls == [[1, 2]] and torch.get_num_threads() == 1 and first.thread_rates == {1: 2e9, 2: 1e9}
        first.fit()
        assert checkpoint.load(tmp_path / "r").meta["threads"] == 1
        torch.set_num_threads(2)
        calls.clear()
        resumed = loop.Trainer(fit.resume_config(tmp_path / "r", {"train.max_steps": 4}), resume=tmp_path / "r")
        assert torch.get_num_threads() == 1 and resumed.thread_rates is None and calls == [[1]]
        resumed.close()
    finally:
        torch.set_num_threads(before)


# -- lock first ------------------------------------------------------------------------------------
def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("stage", ["args", "autotune",
                                   *(pytest.param(s, marks=pytest.mark.slow) for s in ("data", "build", "save"))])
def test_two_runs_racing_for_one_directory_never_replace_a_finished_run(stage, tmp_path, capsys):
    """B starts first and is held at ``stage``; A runs in this process meanwhile; then B goes on.
    Before the lock (args) A wins and B, finding a finished run, is refused; after it B holds the
    directory and A is refused at once. Either way one run finishes and the other changes nothing."""
    run, gate = tmp_path / "run", tmp_path / "gate"
    gate.mkdir()
    argv = ["train", *TINY, "--steps", "3", "--out", str(run), "--json"]
    hooked = [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), "--pause", stage, str(gate), "--"]
    b = subprocess.Popen([*hooked, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(gate / stage, b)
        a_rc = cli.main(argv)
        a_out, a_err = capsys.readouterr()
        (gate / "go").touch()
        b_out, b_err = b.communicate(timeout=300)
    finally:
        b.kill()
        b.wait()
    winner, loser_err = (a_out, b_err) if stage == "args" else (b_out, a_err)
    assert (a_rc, b.returncode) == ((0, 2) if stage == "args" else (2, 0)), (a_err, b_err)
    error = [line for line in loser_err.splitlines() if "error:" in line]
    assert len(error) == 1, loser_err
    assert ("already has checkpoints; continue it with --resume" if stage == "args" else "is in use by pid") in error[0]
    result = json.loads(winner.strip().splitlines()[-1])
    assert json.loads((run / "result.json").read_text()) == result and result["steps"] == 3
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [3]
