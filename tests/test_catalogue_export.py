"""The bad-input catalogue, `tfamily export` rows: what would destroy data (an existing --out
without --force, an --out inside a run's checkpoints/, a disk without room) and an hf export the
peer cannot take are each one line naming the value and the fix (exit status 2, no traceback),
with nothing written and nothing removed."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tfamily import cli
from tfamily.export import graphs as export_module

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=32", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=128",
        "train.progress=false", "train.tensorboard=false", "train.warmup=1"]


@dataclass
class Case:  # tests/test_catalogue.py's rows, with the one patch a row may need
    id: str
    argv: list
    words: list
    setup: Callable | None = None   # (tmp_path, paths) -> extra placeholders
    patch: Callable | None = None   # (monkeypatch) -> None


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    run = tmp_path_factory.mktemp("catalogue_export") / "run"
    assert cli.main(["train", *TINY, "--steps", "1", "--out", str(run)]) == 0
    ckpt = sorted((run / "checkpoints").glob("step-*"))[-1]
    return {"run": str(run), "ckpt": str(ckpt)}


def existing_file(tmp_path, paths):
    (tmp_path / "m.pt").write_text("keep me")
    return {"out": str(tmp_path / "m.pt")}


def existing_dir(tmp_path, paths):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "notes.txt").write_text("keep me")
    return {"out": str(tmp_path / "hf")}


def dir_of_dirs(tmp_path, paths):
    (tmp_path / "hf" / "data").mkdir(parents=True)
    return {"out": str(tmp_path / "hf")}


def scaled_embeddings(tmp_path, paths):
    """A run whose spec scales its embeddings (no weight of its own, so the run still loads)."""
    run = tmp_path / "run"
    shutil.copytree(paths["run"], run)
    for meta in run.glob("checkpoints/step-*/meta.json"):
        d = json.loads(meta.read_text())
        d["spec"]["scale_embeddings"] = True
        meta.write_text(json.dumps(d))
    return {"bad": str(run), "meta": str(sorted(run.glob("checkpoints/step-*/meta.json"))[-1])}


def no_room(monkeypatch):
    monkeypatch.setattr(export_module, "free_bytes", lambda where: 1 << 20)


CASES = [
    Case("export over an existing file", ["export", "{run}", "--format", "torchscript", "--out", "{out}"],
         ["--out {out} exists", "--force"], existing_file),
    Case("export hf over a directory with files", ["export", "{run}", "--format", "hf", "--out", "{out}"],
         ["--out {out}", "not an empty directory", "new directory", "--force"], existing_dir),
    Case("export hf --force over a directory of directories",
         ["export", "{run}", "--format", "hf", "--out", "{out}", "--force"],
         ["--out {out}", "holding data/", "new directory"], dir_of_dirs),
    Case("export into a run's checkpoints", ["export", "{run}", "--format", "pt2", "--out",
                                             "{run}/checkpoints/m.pt2", "--force"],
         ["{run}/checkpoints/m.pt2", "inside the checkpoints of run {run}", "{run}/export"]),
    Case("export hf into a checkpoint", ["export", "{run}", "--format", "hf", "--out", "{ckpt}/hf", "--force"],
         ["{ckpt}/hf", "inside the checkpoints of run {run}", "{run}/export"]),
    Case("export with no room", ["export", "{run}", "--format", "torchscript", "--out", "{tmp}/m.pt"],
         ["No space left on device in {tmp}", "needs about 16.", "(1.0 MiB free)", "pick another directory"],
         patch=no_room),
    Case("export hf with no room", ["export", "{run}", "--format", "hf", "--out", "{tmp}/hf/mine"],
         ["No space left on device in {tmp}/hf", "needs about 16.", "(1.0 MiB free)"], patch=no_room),
    Case("export hf of a spec gpt2 cannot express", ["export", "{bad}", "--format", "hf", "--out", "{tmp}/hf"],
         ["scale_embeddings=True has no mapping (gpt2 fixes False)", "its spec in {meta}",
          "model.scale_embeddings=false", "--format onnx or torchscript or pt2"], scaled_embeddings),
]


def _fill(arg: str, subs: dict) -> str:
    for k, v in subs.items():
        arg = arg.replace("{" + k + "}", v)
    return arg


def _files(d: Path) -> dict:
    return {str(p.relative_to(d)): p.stat().st_size for p in d.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_export_bad_input_is_one_line_and_writes_nothing(case, paths, tmp_path, capsys, monkeypatch):
    subs = {**paths, "tmp": str(tmp_path)}
    if case.setup is not None:
        subs.update(case.setup(tmp_path, paths))
    if case.patch is not None:
        case.patch(monkeypatch)
    argv = [_fill(a, subs) for a in case.argv]
    before = _files(tmp_path), _files(Path(paths["run"]))
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("tfamily export: error: "), err
    for w in case.words:
        assert _fill(w, subs) in err, (_fill(w, subs), err)
    assert (_files(tmp_path), _files(Path(paths["run"]))) == before
