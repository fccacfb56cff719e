"""The bad-input catalogue, documented behaviours (issue 13): inputs that are answered by a
defined behaviour rather than a refusal, each asserted end to end."""
from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tfamily import cli
from tfamily.train import checkpoint

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "train.warmup=1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("behaviour") / "run"
    assert cli.main(["train", *TINY, "--steps", "4", "train.ckpt_every=2", "--out", str(out)]) == 0
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _rewrite(ck: Path, fname: str, data: bytes) -> None:
    """Replace a checkpoint file and record its new size and hash, as a writer would."""
    (ck / fname).write_bytes(data)
    meta = json.loads((ck / "meta.json").read_text())
    meta["files"][fname] = {"bytes": len(data), "sha256": checkpoint.sha256(ck / fname)}
    (ck / "meta.json").write_text(json.dumps(meta))


def test_eval_json_of_nan_weights_prints_null_and_exits_nonzero(run, tmp_path, capsys):
    run = _copy(run, tmp_path)
    for ck in (run / "checkpoints").glob("step-*"):
        weights = {k: torch.full_like(v, float("nan")) for k, v in load_file(ck / "model.safetensors").items()}
        save_file(weights, str(tmp_path / "w.safetensors"))
        _rewrite(ck, "model.safetensors", (tmp_path / "w.safetensors").read_bytes())
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--json", "--max-tokens", "256"]) == 3
    out, err = capsys.readouterr()
    result = json.loads(out.strip().splitlines()[-1])  # strict JSON: no bare NaN
    assert result["val_loss"] is None and result["val_bpc"] is None
    assert "NaN" not in out and len(err.strip().splitlines()) == 1 and "not finite" in err


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one_and_says_so(run, tmp_path, capsys):
    run = _copy(run, tmp_path)
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    f = newest / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-10:] = b"\xff" * 10
    f.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--json", "--max-tokens", "256"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 2
    assert f"skipping {newest}" in err and "SHA-256" in err


def test_a_corrupt_header_is_found_even_when_its_hash_was_recorded(run, tmp_path):
    run = _copy(run, tmp_path)
    ck = sorted((run / "checkpoints").glob("step-*"))[-1]
    data = bytearray((ck / "model.safetensors").read_bytes())
    data[8:12] = b"\x00\x01{["
    _rewrite(ck, "model.safetensors", bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="corrupt safetensors header"):
        checkpoint.read_meta(ck)
    assert checkpoint.resolve(run).name == "step-00000002"  # the run falls back to the previous one


@pytest.mark.parametrize("error, clean", [
    (PermissionError(errno.EACCES, "Permission denied", "/x/out"), "Permission denied: /x/out"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/run"), "Read-only file system: /ro/run"),
    (OSError(errno.ENOSPC, "No space left on device", "/full/run"), "No space left on device: /full/run"),
    (NotADirectoryError("--out /x is a file, not a directory"), "--out /x is a file"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/x/config.yaml"), "Is a directory: /x/config.yaml"),
    (MemoryError(), "out of memory"),
    (FileNotFoundError("data file 'kjv.txt' not found. Searched:\n  /a/kjv.txt\n  /b/kjv.txt\nTo fix: x"),
     "not found. Searched: /a/kjv.txt; /b/kjv.txt; To fix: x"),
    (KeyError("spec"), None),
    (RuntimeError("CUDA error"), None),
    (OSError(errno.EIO, "Input/output error", "/dev/sda"), None),
    (AttributeError("x"), None),
])
def test_the_cli_turns_user_errors_into_one_line_and_keeps_tracebacks_for_bugs(error, clean):
    msg = cli.user_error(error)
    if clean is None:
        assert msg is None
    else:
        assert clean in msg and "\n" not in msg


def test_a_bug_is_not_hidden_by_the_cli(monkeypatch):
    import tfamily.train.cli as train_cli

    def bug(args):
        raise KeyError("a bug")
    monkeypatch.setattr(train_cli, "_eval", bug)
    with pytest.raises(KeyError):
        cli.main(["eval", "somewhere"])


def test_lr_1e38_stops_with_the_weights_of_the_last_checkpoint_finite(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *TINY, "train.lr=1e38", "train.warmup=0", "train.grad_clip=null", "--steps", "6",
            "train.ckpt_every=1", "--out", str(out)]
    assert cli.main(argv) == 3
    err = capsys.readouterr().err
    assert "stopped" in err and "non-finite" in err
    for ck in (out / "checkpoints").glob("step-*"):  # every checkpoint written is finite
        assert all(torch.isfinite(v).all() for v in load_file(ck / "model.safetensors").values()), ck


def test_a_second_writer_on_one_out_is_refused_naming_the_holder(tmp_path, capsys):
    import subprocess
    import sys
    hold = ("import sys, time\nfrom tfamily.train.rundir import RunLock\nlock = RunLock(sys.argv[1])\n"
            "print('held', flush=True)\ntime.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert cli.main(["train", *TINY, "--steps", "1", "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"in use by pid {p.pid}" in err and "another --out" in err
        assert not (tmp_path / "run" / "train.csv").exists()
    finally:
        p.kill()
        p.wait()
    assert cli.main(["train", *TINY, "--steps", "1", "--out", str(tmp_path / "run")]) == 0  # stale: taken over


def test_a_resumed_run_reports_the_train_loss_over_both_sessions(tmp_path, capsys):
    import csv
    out = tmp_path / "run"
    assert cli.main(["train", *TINY, "train.log_every=1", "--steps", "3", "--out", str(out)]) == 0
    assert cli.main(["train", "--resume", str(out), "--steps", "6", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with open(out / "train.csv") as f:
        losses = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    # train_loss is the mean of the latest (up to 50) step losses, the first session's included
    assert got["train_loss"] == pytest.approx(sum(losses.values()) / 6, rel=1e-6)
    assert json.loads((out / "result.json").read_text())["train_loss"] == got["train_loss"]


def test_resume_and_eval_keep_the_data_directory_the_run_used(tmp_path, monkeypatch, capsys):
    import os
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(Path(os.environ["TFAMILY_DATA"]) / "tinyshakespeare.txt", data / "tinyshakespeare.txt")
    monkeypatch.setenv("TFAMILY_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert cli.main(["train", *TINY, "--steps", "2", "--out", str(out), "--data-dir", str(data)]) == 0
    assert cli.main(["train", "--resume", str(out), "--steps", "3"]) == 0  # no --data-dir: the run's own
    assert cli.main(["eval", str(out), "--max-tokens", "256"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(out), "--steps", "4", "--data-dir", str(tmp_path)]) == 2
    assert "tinyshakespeare.txt" in capsys.readouterr().err  # told otherwise: that directory is searched
