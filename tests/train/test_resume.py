"""Kill-and-resume: a training process killed with SIGKILL (between checkpoints, and in
the middle of writing one) resumes from its last complete checkpoint and repeats the
uninterrupted run's loss curve bit for bit (CPU, one thread); a half-written
checkpoint is never loaded."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfamily.train import checkpoint
from tfamily.train.metrics import read_csv

from .killing import kill_when_flagged

# Tiny but complete: dropout on (so RNG restore matters), warm-up + cosine, AdamW, clipping.
TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=2",
        "model.position.max_len=32", "model.dropout=0.1", "data.corpus=tinyshakespeare", "data.seq_len=32",
        "train.batch_size=4", "train.max_steps=12", "train.ckpt_every=4", "train.keep=2", "train.log_every=1",
        "train.eval_every=null", "train.eval_tokens=1024", "train.warmup=3", "train.lr=3e-3",
        "train.threads=1", "train.precision=fp32", "train.progress=false", "train.tensorboard=false"]


def _cmd(*args: str, hooks: tuple[str, ...] = ()) -> list[str]:
    """``hooks``: the tests' hooks (tests/hooked_cli.py) installed in the run."""
    return [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), *hooks, "--", "train", *args]


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(args: list[str], **env: str) -> None:
    proc = subprocess.run(_cmd(*args), env=_env(**env), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _run_until_killed(args: list[str], halt: str, tmp: Path) -> None:
    """Start training, wait until it reaches the halt point, SIGKILL it."""
    flag = tmp / f"halted-{halt.replace(':', '-')}"
    proc = subprocess.Popen(_cmd(*args, hooks=("--halt", halt, str(flag))), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_when_flagged(proc, flag, halt)


def _curve(run: Path) -> list[tuple[str, str, str]]:
    # Compared as the written strings (repr of the float): equality is bitwise.
    return [(r["step"], r["loss"], r["grad_norm"]) for r in read_csv(run / "train.csv")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("reference") / "run"
    _run([*TINY, f"train.out={run}"])
    return run


def _final_weights_hash(run: Path) -> str:
    return checkpoint.read_meta(checkpoint.resolve(run))["files"]["model.safetensors"]["sha256"]


def test_uninterrupted_reference_is_complete(reference):
    curve = _curve(reference)
    assert [int(s) for s, _, _ in curve] == list(range(1, 13))
    assert float(curve[-1][1]) < float(curve[0][1])  # it learns
    # keep=2: only the two newest checkpoints remain.
    assert [s for s, _ in checkpoint.step_dirs(reference / "checkpoints")] == [12, 8]


def test_sigkill_between_checkpoints_resumes_bitwise(reference, tmp_path):
    run = tmp_path / "run"
    _run_until_killed([*TINY, f"train.out={run}"], "step:6", tmp_path)
    # Killed after step 6: steps 5-6 were logged but only step 4 is checkpointed.
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [4]
    assert len(read_csv(run / "train.csv")) == 6
    _run(["--resume", str(run)])
    assert _curve(run) == _curve(reference)
    assert _final_weights_hash(run) == _final_weights_hash(reference)
    assert read_csv(run / "eval.csv") == read_csv(reference / "eval.csv")


def test_sigkill_during_checkpoint_write_never_loads_the_half_written_one(reference, tmp_path):
    run = tmp_path / "run"
    _run_until_killed([*TINY, f"train.out={run}"], "checkpoint:8", tmp_path)
    ckdir = run / "checkpoints"
    half = [p for p in ckdir.iterdir() if p.name.startswith(".tmp-step-00000008")]
    assert len(half) == 1 and (half[0] / "model.safetensors").is_file() and not (half[0] / "meta.json").exists()
    assert checkpoint.resolve(run) == ckdir / "step-00000004"  # the complete one, not the half-written one
    _run(["--resume", str(run)])
    assert not any(p.name.startswith(".tmp-") for p in ckdir.iterdir())  # cleaned up on resume
    assert _curve(run) == _curve(reference)
    assert _final_weights_hash(run) == _final_weights_hash(reference)


def test_muon_run_killed_between_checkpoints_resumes_bitwise(tmp_path):
    """train.optimizer=muon (Muon + AdamW as one optimiser): its state survives the checkpoint."""
    tiny = [*TINY, "train.optimizer=muon"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    _run([*tiny, f"train.out={ref}"])
    _run_until_killed([*tiny, f"train.out={run}"], "step:6", tmp_path)
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [4]
    _run(["--resume", str(run)])
    assert _curve(run) == _curve(ref)
    assert _final_weights_hash(run) == _final_weights_hash(ref)
