"""Two CPU processes under torchrun (DDP, gloo) train like one process with the same
global batch: the same loss curve within float tolerance, rank 0 alone writing logs
and checkpoints."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfamily.train import checkpoint
from tfamily.train.metrics import read_csv

ARGS = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=2",
        "model.position.max_len=32", "model.dropout=0.0", "data.seq_len=32", "train.batch_size=8",
        "train.max_steps=8", "train.log_every=1", "train.eval_every=4", "train.eval_tokens=2048",
        "train.ckpt_every=4", "train.threads=1", "train.precision=fp32", "train.progress=false",
        "train.tensorboard=false", "train.warmup=2"]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _train(out: Path, nproc: int, *extra: str) -> dict:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                if nproc > 1 else [sys.executable])
    cmd = [*launcher, "-m", "tfamily.cli", "train", *ARGS, f"train.out={out}", "--json", *extra]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout  # only rank 0 reports
    return json.loads(lines[0])


def _losses(run: Path, name: str = "train.csv") -> list[float]:
    return [float(r["loss"]) for r in read_csv(run / name)]


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    r1, r2 = _train(one, 1), _train(two, 2)
    assert (r1["world_size"], r2["world_size"]) == (1, 2)
    assert r1["tokens"] == r2["tokens"] == 8 * 8 * 32
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 8
    assert a[-1] < a[0]
    assert b == pytest.approx(a, rel=1e-5, abs=1e-6)
    assert _losses(two, "eval.csv") == pytest.approx(_losses(one, "eval.csv"), rel=1e-5)
    # The ranks' models stayed in lockstep and rank 0 wrote one set of checkpoints.
    assert [s for s, _ in checkpoint.step_dirs(two / "checkpoints")] == [8, 4]
    meta = checkpoint.read_meta(checkpoint.resolve(two))
    assert meta["world_size"] == 2 and {"torch.rank0", "torch.rank1"} <= set(
        checkpoint.Loaded(checkpoint.resolve(two), meta).group("rng"))


@pytest.mark.slow
def test_two_process_run_resumes_exactly(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    # Dropout on: each rank's RNG state must come back. A constant learning rate, so that
    # stopping at 4 and extending to 8 steps follows the same schedule as 8 steps at once.
    extra = ["model.dropout=0.1", "train.warmup=0", "train.min_lr_ratio=1.0"]
    _train(full, 2, *extra)
    _train(part, 2, *extra, "--steps", "4")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "tfamily.cli", "train", "--resume", str(part), "--steps", "8"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _losses(part) == _losses(full)


@pytest.mark.slow
def test_two_processes_carry_memory_like_one_and_resume_it_exactly(tmp_path):
    # XL memory on contiguous streams: each rank carries its rows' memory; the checkpoint holds
    # every rank's share (snapshot.py) and a resumed two-process run repeats the full one.
    xl = ["model.position.name=sinusoidal", "model.state.name=xl_memory", "model.state.mem_len=16",
          "data.stream=true", "data.seq_len=16", "train.warmup=0", "train.min_lr_ratio=1.0", "train.eval_every=null"]
    one, full, part = tmp_path / "one", tmp_path / "full", tmp_path / "part"
    _train(one, 1, *xl)
    _train(full, 2, *xl)
    assert _losses(full) == pytest.approx(_losses(one), rel=1e-5, abs=1e-6)
    carry = checkpoint.load(full).group("carry")
    assert {"memory.0.rank0", "memory.0.rank1", "memory.1.rank0", "memory.1.rank1"} <= set(carry)
    _train(part, 2, *xl, "--steps", "4")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "tfamily.cli", "train", "--resume", str(part), "--steps", "8"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _losses(part) == _losses(full)
