"""Checkpoint format versions (train/versions.py): every checkpoint names its format_version, one
written before versioning reads as version 1, a newer one is refused in one line naming both
versions, and an older one is read through its upgrade (meta keys and tensor names)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tfamily import build, members
from tfamily.train import checkpoint, versions


def _write(tmp_path: Path, model) -> Path:
    return checkpoint.write(tmp_path / "checkpoints", 3, model, {}, {"note": "x"}, keep=2)


def _edit(ck: Path, edit) -> None:
    meta = json.loads((ck / "meta.json").read_text())
    edit(meta)
    (ck / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build(members.gpt(d_model=16, vocab_size=11, heads=dict(n_heads=2), depth=dict(n_layers=1)))


def test_every_checkpoint_names_its_format_version(tmp_path, model):
    ck = _write(tmp_path, model)
    assert json.loads((ck / "meta.json").read_text())["format_version"] == versions.FORMAT_VERSION
    assert checkpoint.load(ck, require=()).meta["format_version"] == versions.FORMAT_VERSION


def test_a_checkpoint_from_before_versioning_reads_as_version_1(tmp_path, model):
    ck = _write(tmp_path, model)
    _edit(ck, lambda m: m.pop("format_version"))
    loaded = checkpoint.load(ck, require=())
    assert loaded.meta["format_version"] == 1 and loaded.meta["note"] == "x"
    loaded.load_weights(model)


def test_a_newer_version_is_refused_in_one_line_naming_both(tmp_path, model):
    ck = _write(tmp_path, model)
    _edit(ck, lambda m: m.update(format_version=versions.FORMAT_VERSION + 7))
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(ck, require=())
    msg = str(e.value)
    assert "\n" not in msg and f"format_version {versions.FORMAT_VERSION + 7}" in msg
    assert f"up to {versions.FORMAT_VERSION}" in msg and "upgrade tfamily" in msg


@pytest.mark.parametrize("bad", ["2", 0, True, None])
def test_a_format_version_that_is_not_a_version_is_refused(tmp_path, model, bad):
    ck = _write(tmp_path, model)
    _edit(ck, lambda m: m.update(format_version=bad))
    with pytest.raises(checkpoint.CheckpointError, match="format_version"):
        checkpoint.load(ck, require=())


def test_an_older_version_is_read_through_its_upgrade(tmp_path, model, monkeypatch):
    """A future version 2 renamed a meta key and a tensor; a version-1 checkpoint still loads."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(iter(checkpoint.model_tensors(model)))
    old = {("legacy." + k if k == name else k): v for k, v in checkpoint.model_tensors(model).items()}
    ck = _write(tmp_path, old)  # version 1 called this tensor legacy.<name>

    def to_2(meta: dict) -> dict:
        meta["remark"] = meta.pop("note")
        meta["renames"] = {"legacy." + name: name}
        return meta
    monkeypatch.setattr(versions, "FORMAT_VERSION", 2)
    monkeypatch.setattr(versions, "UPGRADES", {1: to_2})
    loaded = checkpoint.load(ck, require=())
    assert loaded.meta["format_version"] == 2 and loaded.meta["remark"] == "x" and "note" not in loaded.meta
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    loaded.load_weights(model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    monkeypatch.setattr(versions, "UPGRADES", {})
    with pytest.raises(checkpoint.CheckpointError, match="format_version 1, which this tfamily no longer"):
        checkpoint.load(ck, require=())
