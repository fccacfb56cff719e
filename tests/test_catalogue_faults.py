"""Faults as tests: a full disk at the checkpoint write (an injected ENOSPC; a small tmpfs is the
manual check, since CI may not mount one), Ctrl-C at random points of a save, and the RL loop's
non-finite losses and resumes. Each ends in one line, with the last good checkpoint loadable."""
from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from tfamily import cli
from tfamily.base import interrupt
from tfamily.rl.toy import ID
from tfamily.train import checkpoint

LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1"]
RL = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
      "--d-model", "8", "--layers", "1", "--set", "eval_episodes=4", "--no-progress"]
FULL = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


def _full_after(monkeypatch, n_files: int) -> None:
    """The disk fills after ``n_files`` safetensors files were written (safetensors raises its own
    error type, not OSError, as it does on a real full disk)."""
    real, count = checkpoint.save_file, [0]

    def save_file(tensors, path, metadata=None):
        count[0] += 1
        if count[0] > n_files:
            raise SafetensorError(FULL)
        return real(tensors, path, metadata=metadata)
    monkeypatch.setattr(checkpoint, "save_file", save_file)


@pytest.mark.parametrize("kind", ["lm", "rl"])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_good_one(kind, tmp_path, monkeypatch,
                                                                                  capsys):
    out = tmp_path / "run"
    kept, failed = (1, 2) if kind == "lm" else (2, 4)
    if kind == "lm":  # each checkpoint: model, optimizer, rng
        _full_after(monkeypatch, 3)
        argv = ["train", *LM, "--steps", "4", "train.ckpt_every=1", "--out", str(out)]
    else:  # model, optimizer, rng, data
        _full_after(monkeypatch, 4)
        argv = ["rl", "train", *RL, "--steps", "64", "--ckpt-every", "2", "--out", str(out)]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    last = err[-1]
    for w in ("No space left on device", f"step-{failed:08d}", "needs about", "MiB free",
              f"the last good checkpoint step-{kept:08d} is intact", "free space there"):
        assert w in last, (w, last)
    ckpts = out / "checkpoints"
    assert [p.name for p in ckpts.iterdir()] == [f"step-{kept:08d}"]  # no half-written directory left
    monkeypatch.undo()
    ck = checkpoint.load(out)
    assert ck.meta["step"] == kept and checkpoint.read_meta(ck.path, verify=True)


def test_rl_non_finite_loss_stops_in_one_line_with_trains_exit_code(tmp_path, capsys):
    capsys.readouterr()
    assert cli.main(["rl", "train", *RL, "--steps", "32", "--lr", "1e38", "--out", str(tmp_path / "run")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("tfamily rl: stopped: non-finite") and "--lr" in err[-1], err


def test_rl_resume_to_more_steps_writes_each_evaluation_once(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["rl", "train", *RL, "--steps", "32", "--out", str(out)]) == 0
    assert cli.main(["rl", "train", "--resume", str(out), "--steps", "16"]) == 2  # refused: nothing to train
    assert cli.main(["rl", "train", "--resume", str(out), "--steps", "48", "--member", "lstm", "--seed", "0"]) == 0
    with open(out / "eval.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == [4, 6]


# -- Ctrl-C during a save ------------------------------------------------------------------------
SAVER = ["member=gpt", "model.d_model=128", "model.heads.n_heads=2", "model.depth.n_layers=2",
         "model.position.max_len=64", "data.seq_len=32", "train.batch_size=2", "train.eval_every=null",
         "train.progress=false", "train.tensorboard=true", "train.warmup=1", "train.precision=fp32",
         "train.threads=1", "train.log_every=1", "train.ckpt_every=1"]


def _interrupt_a_save(tmp: Path, seed: int) -> None:
    """Train with a checkpoint every step; SIGINT at a random moment after the n-th save began.
    The process must exit within 5 s, and every checkpoint it left must load and verify."""
    rng = random.Random(seed)
    flag = tmp / "saves"
    hooked = [sys.executable, str(Path(__file__).parent / "hooked_cli.py"), "--saves", str(flag), "--"]
    p = subprocess.Popen([*hooked, "train", *SAVER, "--steps", "100000", "--out", str(tmp / "run")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        n, t0 = rng.randint(2, 4), time.monotonic()
        while not (flag.is_file() and len(flag.read_text().split()) >= n):
            assert p.poll() is None, p.communicate()[1]
            assert time.monotonic() - t0 < 120
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.03))
        p.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130 and took < 5.0, (p.returncode, took, err)
    assert "Traceback" not in err, err
    dirs = checkpoint.step_dirs(tmp / "run" / "checkpoints")
    assert dirs, err
    for _, d in dirs:  # every complete-looking checkpoint verifies (sizes, hashes, headers)
        checkpoint.read_meta(d, verify=True)
    assert checkpoint.load(tmp / "run").meta["step"] >= n - 1


@pytest.mark.parametrize("seed", range(3))
def test_ctrl_c_during_a_save_exits_within_5_s_with_the_checkpoints_intact(seed, tmp_path):
    _interrupt_a_save(tmp_path, seed)


@pytest.mark.slow
def test_ctrl_c_during_a_save_50_times(tmp_path):
    for seed in range(50):
        (tmp_path / str(seed)).mkdir()
        _interrupt_a_save(tmp_path / str(seed), 1000 + seed)


def test_a_sigint_inside_a_deferred_block_is_raised_after_it():
    """The write finishes first; KeyboardInterrupt comes after, and the handler is restored."""
    before = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupt.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append(torch.ones(1).item())
    assert done == [1.0] and signal.getsignal(signal.SIGINT) is before
