"""Faults in `tfamily rl train`: SIGKILL in the middle of a checkpoint write (the last good one
loads, the resumed run repeats the uninterrupted one), and two processes racing for one run
directory, held at each start-up stage (the language model's race is in tests/train/test_startup.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.train import checkpoint
from tfamily.train.metrics import read_csv


def _load_killing():
    spec = importlib.util.spec_from_file_location("_train_killing", Path(__file__).parents[1] / "train" / "killing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kill_when_flagged


kill_when_flagged = _load_killing()
ARGS = ["--env", "tfamily/RememberFirst-v0", "--member", "lstm", "--steps", "48", "--n-envs", "4", "--rollout", "4",
        "--epochs", "1", "--minibatches", "2", "--d-model", "8", "--layers", "1", "--ckpt-every", "2",
        "--set", "eval_episodes=2", "--no-progress"]


def _cmd(*args: str, hooks: tuple[str, ...] = ()) -> list[str]:
    """``hooks``: the tests' hooks (tests/hooked_cli.py) installed in the run."""
    return [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), *hooks, "--", "rl", "train", *args]


def _env(**extra: str) -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", **extra)


def test_sigkill_during_an_rl_checkpoint_write_keeps_the_last_good_one_and_resumes(tmp_path):
    full, killed, flag = tmp_path / "full", tmp_path / "killed", tmp_path / "halted"
    done = subprocess.run(_cmd(*ARGS, "--out", str(full)), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen(_cmd(*ARGS, "--out", str(killed), hooks=("--halt", "checkpoint:4", str(flag))),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    kill_when_flagged(proc, flag, "the write of checkpoint 4")
    ckdir = killed / "checkpoints"
    assert [p.name for p in ckdir.iterdir() if p.name.startswith(".tmp-step-00000004")]  # half written
    assert checkpoint.resolve(killed) == ckdir / "step-00000002"
    checkpoint.read_meta(ckdir / "step-00000002", verify=True)
    again = subprocess.run(_cmd("--resume", str(killed), "--no-progress"), env=_env(), capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    curve = [[r[k] for k in ("step", "loss", "grad_norm")] for r in read_csv(full / "train.csv")]
    assert [[r[k] for k in ("step", "loss", "grad_norm")] for r in read_csv(killed / "train.csv")] == curve


def _wait_for(path: Path, proc, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("stage", ["args", "data",
                                   *(pytest.param(s, marks=pytest.mark.slow) for s in ("build", "autotune", "save"))])
def test_two_rl_runs_racing_for_one_directory_never_replace_a_finished_run(stage, tmp_path, capsys):
    """B starts first and is held at ``stage``; A runs in this process; then B goes on. Before the
    lock (args) A finishes and B is refused; after it B holds the directory and A is refused."""
    run, gate = tmp_path / "run", tmp_path / "gate"
    gate.mkdir()
    argv = [*ARGS, "--out", str(run), "--json"]
    b = subprocess.Popen(_cmd(*argv, hooks=("--pause", stage, str(gate))), env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(gate / stage, b)
        capsys.readouterr()
        a_rc = cli.main(["rl", "train", *argv])
        a_out, a_err = capsys.readouterr()
        (gate / "go").touch()
        b_out, b_err = b.communicate(timeout=300)
    finally:
        b.kill()
        b.wait()
    first = stage == "args"
    assert (a_rc, b.returncode) == ((0, 2) if first else (2, 0)), (a_err, b_err)
    winner, loser_err = (a_out, b_err) if first else (b_out, a_err)
    errors = [ln for ln in loser_err.splitlines() if ": error: " in ln]
    assert len(errors) == 1, loser_err
    assert ("already has checkpoints; continue it with --resume" if first else "is in use by pid") in errors[0]
    result = json.loads(winner[winner.index("{"):])
    assert json.loads((run / "result.json").read_text())["tokens"] == result["tokens"] == 48
