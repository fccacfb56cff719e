"""A read-only run directory (a mounted archive, a read-only disk): resuming a language-model or RL
run there, or starting one inside it, is refused in one line naming the directory, and nothing in
it changes. Every write under the directory fails with EROFS, as on a read-only mount (chmod would
not stop root, who runs CI containers)."""
from __future__ import annotations

import builtins
import errno
import hashlib
import os
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.rl.toy import ID

LM = ["member=gpt", "model.d_model=16", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=32", "data.seq_len=16", "train.batch_size=2", "train.eval_tokens=64",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.precision=fp32",
      "train.threads=1", "train.ckpt_every=1"]
RL = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
      "--d-model", "8", "--layers", "1", "--set", "eval_episodes=2", "--no-progress"]
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def read_only(monkeypatch, root: Path) -> None:
    """Every call that would create, write, rename or remove a file under ``root`` fails with EROFS."""
    root = str(root.resolve())

    def inside(path) -> bool:
        try:
            return os.path.abspath(os.fspath(path)).startswith(root)
        except TypeError:  # a file descriptor
            return False

    def refuse(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def guard(real, writes=lambda *a, **k: True, paths=1):
        def call(*a, **k):
            for p in a[:paths]:
                if inside(p) and writes(*a, **k):
                    refuse(p)
            return real(*a, **k)
        return call

    monkeypatch.setattr(os, "open", guard(os.open, lambda p, flags, *a, **k: bool(flags & WRITE)))
    monkeypatch.setattr(builtins, "open", guard(builtins.open, lambda p, mode="r", *a, **k: mode.strip("rbt") != ""))
    for name in ("mkdir", "makedirs", "unlink", "remove", "rmdir", "replace", "rename"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), paths=2))


def _snapshot(run: Path) -> dict:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("what", ["lm resume", "rl resume", "lm new run inside"])
def test_a_read_only_run_directory_is_refused_in_one_line_and_left_as_it_was(what, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    if what.startswith("rl"):
        assert cli.main(["rl", "train", *RL, "--steps", "32", "--ckpt-every", "2", "--out", str(run)]) == 0
        argv = ["rl", "train", "--resume", str(run), "--steps", "64"]
    else:
        assert cli.main(["train", *LM, "--steps", "2", "--out", str(run)]) == 0
        argv = (["train", "--resume", str(run), "--steps", "4"] if what == "lm resume" else
                ["train", *LM, "--steps", "2", "--out", str(run / "inner")])
    before = _snapshot(run)
    capsys.readouterr()
    read_only(monkeypatch, run)
    rc = cli.main(argv)
    monkeypatch.undo()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err
    assert "Read-only file system" in errors[0] and str(run) in errors[0], errors[0]
    assert "pick a" in errors[0] or "pick another" in errors[0], errors[0]  # the fix
    assert _snapshot(run) == before
