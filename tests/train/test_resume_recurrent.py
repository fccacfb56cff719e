"""Kill-and-resume with a recurrent LM (member lstm_lm, nn/depth/recurrent.py): its hidden state is
carried across the batches of contiguous streams and checkpointed through the State protocol,
so a run SIGKILLed between checkpoints resumes and repeats the uninterrupted run bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tfamily.train import checkpoint
from tfamily.train.metrics import read_csv

from .killing import kill_when_flagged

TINY = ["member=lstm_lm", "model.d_model=32", "model.depth.n_layers=2", "model.dropout=0.1",
        "data.corpus=tinyshakespeare", "data.stream=true", "data.seq_len=16", "train.batch_size=4",
        "train.max_steps=12", "train.ckpt_every=4", "train.keep=2", "train.log_every=1", "train.eval_every=null",
        "train.eval_tokens=512", "train.warmup=3", "train.lr=3e-3", "train.threads=1", "train.precision=fp32",
        "train.progress=false", "train.tensorboard=false"]


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _cmd(*args: str, hooks: tuple[str, ...] = ()) -> list[str]:
    """``hooks``: the tests' hooks (tests/hooked_cli.py) installed in the run."""
    return [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), *hooks, "--", "train", *args]


def _run(args: list[str]) -> None:
    proc = subprocess.run(_cmd(*args), env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _curve(run: Path) -> list[tuple[str, str, str]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in read_csv(run / "train.csv")]


def _weights(run: Path) -> str:
    return checkpoint.read_meta(checkpoint.resolve(run))["files"]["model.safetensors"]["sha256"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("reference") / "run"
    _run([*TINY, f"train.out={run}"])
    return run


def test_the_hidden_state_is_checkpointed(reference):
    ck = checkpoint.resolve(reference)
    carried = {k for f in ck.iterdir() if f.suffix == ".safetensors" for k in load_file(f)}
    assert {"h.rank0", "c.rank0"} <= carried, sorted(carried)
    assert float(_curve(reference)[-1][1]) < float(_curve(reference)[0][1])


def test_sigkill_between_checkpoints_resumes_bitwise_with_the_rnn_state(reference, tmp_path):
    run = tmp_path / "run"
    flag = tmp_path / "halted"
    proc = subprocess.Popen(_cmd(*TINY, f"train.out={run}", hooks=("--halt", "step:6", str(flag))), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_when_flagged(proc, flag, "step:6")
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [4]
    _run(["--resume", str(run)])
    assert _curve(run) == _curve(reference)
    assert _weights(run) == _weights(reference)
