"""`tfamily rl train` killed with SIGKILL between checkpoints, with its last checkpoint in
the middle of a rollout (buffer, environments and torso memory saved), resumes and
repeats the uninterrupted run's losses and returns bit for bit (CPU, one thread)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfamily.train.metrics import read_csv



def _load_killing():
    # tests/train and tests/rl are separate top-level packages under --import-mode=importlib
    spec = importlib.util.spec_from_file_location("_train_killing", Path(__file__).parents[1] / "train" / "killing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kill_when_flagged


kill_when_flagged = _load_killing()

# 4 envs x 4 steps per rollout, 2 epochs x 2 minibatches = 4 updates per rollout; checkpoints
# every 3 updates land inside rollouts.
ARGS = ["--env", "tfamily/RememberFirst-v0", "--steps", "64", "--n-envs", "4", "--rollout", "4", "--epochs", "2",
        "--minibatches", "2", "--d-model", "16", "--layers", "1", "--heads", "2", "--mem-len", "4",
        "--ckpt-every", "3", "--set", "eval_episodes=4", "--no-progress"]


def _cmd(*args: str, hooks: tuple[str, ...] = ()) -> list[str]:
    """``hooks``: the tests' hooks (tests/hooked_cli.py) installed in the run."""
    return [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), *hooks, "--", "rl", "train", *args]


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(args: list[str], **env: str) -> None:
    proc = subprocess.run(_cmd(*args), env=_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _curve(run: Path) -> list[tuple]:
    return [(r["step"], r["tokens"], r["loss"], r["grad_norm"], r["mean_return"], r["episodes"])
            for r in read_csv(run / "train.csv")]


@pytest.mark.parametrize("member", ["transformer_xl", "lstm"])
def test_rl_resume_after_sigkill_is_bitwise(tmp_path, member):
    full, killed = tmp_path / "full", tmp_path / "killed"
    _run([*ARGS, "--member", member, "--out", str(full)])
    flag = tmp_path / "halted"
    proc = subprocess.Popen(_cmd(*ARGS, "--member", member, "--out", str(killed),
                                 hooks=("--halt", "step:8", str(flag))), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_when_flagged(proc, flag, "step 8")
    assert sorted(p.name for p in (killed / "checkpoints").iterdir() if p.name.startswith("step-")) == \
        ["step-00000003", "step-00000006"]  # the last one mid-rollout (update 2 of 4)
    _run(["--resume", str(killed), "--no-progress"])
    a, b = _curve(full), _curve(killed)
    assert len(a) == 16 and a == b
    assert any(r[4] not in ("", None) for r in a)  # episodes ended and were reported
