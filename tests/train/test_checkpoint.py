"""Checkpoint files: atomic layout, validation, keep-last-K, RNG round trip, no pickle."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from tfamily import members
from tfamily.build import build
from tfamily.train import checkpoint
from tfamily.train.rng import capture_rng, restore_rng


def _model():
    return build(members.gpt(d_model=32, vocab_size=20, heads=dict(n_heads=2), depth=dict(n_layers=1),
                             position=dict(max_len=16)))


def _write(root, step, model, keep=3):
    return checkpoint.write(root, step, model, {"extra": {"a": torch.arange(5.0) * step}}, {"note": step}, keep)


def test_write_read_and_load_weights_with_tied_embeddings(tmp_path):
    m = _model()
    path = _write(tmp_path, 7, m)
    assert path.name == "step-00000007"
    assert sorted(p.name for p in path.iterdir()) == ["extra.safetensors", "meta.json", "model.safetensors"]
    meta = checkpoint.read_meta(path)
    assert meta["step"] == 7 and meta["note"] == 7 and set(meta["files"]) == {"model.safetensors", "extra.safetensors"}
    fresh = _model()
    loaded = checkpoint.load(tmp_path, require=())
    loaded.load_weights(fresh)
    for (name, a), b in zip(m.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert fresh.head.tied is fresh.embed  # still tied after loading
    assert torch.equal(loaded.group("extra")["a"], torch.arange(5.0) * 7)


class _Flat(torch.nn.Module):
    """Two parameters that are views into parts of one buffer, as cuDNN packs an RNN's weights on CUDA."""

    def __init__(self, seed):
        super().__init__()
        flat = torch.randn(12, generator=torch.Generator().manual_seed(seed))
        self.a = torch.nn.Parameter(flat[:8].view(2, 4))
        self.b = torch.nn.Parameter(flat[8:])
        self.a.data, self.b.data = flat[:8].view(2, 4), flat[8:]  # both share flat's storage


def test_views_into_one_buffer_round_trip(tmp_path):
    m, fresh = _Flat(0), _Flat(1)
    assert m.a.untyped_storage().data_ptr() == m.b.untyped_storage().data_ptr()
    _write(tmp_path, 1, m)
    checkpoint.load(tmp_path, require=()).load_weights(fresh)
    assert torch.equal(fresh.a, m.a) and torch.equal(fresh.b, m.b)
    assert fresh.a.untyped_storage().data_ptr() == fresh.b.untyped_storage().data_ptr()  # still one buffer


def test_a_file_keeping_the_other_tied_name_loads(tmp_path):
    """A tied tensor is saved once; files written by safetensors' save_model may keep either name."""
    m = _model()
    path = _write(tmp_path, 2, m)
    state = checkpoint.load_file(str(path / "model.safetensors"))
    assert "embed.weight" in state and "head.tied.weight" not in state
    loaded = checkpoint.load(tmp_path, require=())  # verified as written; then the file is swapped
    state["head.tied.weight"] = state.pop("embed.weight")
    checkpoint.save_file(state, str(path / "model.safetensors"))
    fresh = _model()
    loaded.load_weights(fresh)
    assert torch.equal(fresh.embed.weight, m.embed.weight) and fresh.head.tied is fresh.embed


def test_keeps_only_the_newest_k(tmp_path):
    m = _model()
    for step in (1, 2, 3, 4, 5):
        _write(tmp_path, step, m, keep=2)
    assert [s for s, _ in checkpoint.step_dirs(tmp_path)] == [5, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004", "step-00000005"]


def test_incomplete_or_corrupt_checkpoints_are_skipped(tmp_path, capsys):
    m = _model()
    _write(tmp_path, 1, m)
    newest = _write(tmp_path, 2, m)
    # A half-written checkpoint (what a kill mid-write leaves) is never a candidate.
    half = tmp_path / ".tmp-step-00000003-999"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\0" * 10)
    assert checkpoint.resolve(tmp_path) == newest
    # Truncate a file of the newest: it fails validation and the previous one is used.
    f = newest / "extra.safetensors"
    f.write_bytes(f.read_bytes()[:-3])
    assert checkpoint.resolve(tmp_path).name == "step-00000001"
    assert "truncated" in capsys.readouterr().err
    with pytest.raises(checkpoint.CheckpointError, match="truncated"):
        checkpoint.read_meta(newest)
    # Same size, different bytes: caught by the hash.
    g = tmp_path / "step-00000001" / "extra.safetensors"
    data = bytearray(g.read_bytes())
    data[-1] ^= 0xFF
    g.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="SHA-256"):
        checkpoint.read_meta(g.parent)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        checkpoint.resolve(tmp_path)
    assert checkpoint.clean_stale(tmp_path) == [half] and not half.exists()


def test_missing_meta_and_wrong_path_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        checkpoint.resolve(tmp_path / "nope")
    d = tmp_path / "step-00000001"
    d.mkdir()
    with pytest.raises(checkpoint.CheckpointError, match="no meta.json"):
        checkpoint.read_meta(d)
    (d / "meta.json").write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        checkpoint.read_meta(d)


def test_weights_of_another_shape_are_refused(tmp_path):
    _write(tmp_path, 1, _model())
    other = build(members.gpt(d_model=32, vocab_size=20, heads=dict(n_heads=2), depth=dict(n_layers=2),
                              position=dict(max_len=16)))
    with pytest.raises(checkpoint.CheckpointError, match="does not fit"):
        checkpoint.load(tmp_path, require=()).load_weights(other)


def test_rng_states_round_trip(tmp_path):
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    torch.rand(3), np.random.rand(3), random.random()
    tensors, meta = capture_rng()
    meta = json.loads(json.dumps(meta))
    want = (torch.rand(4), np.random.rand(4), np.random.randn(3), random.random(), random.gauss(0, 1))
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    restore_rng(tensors, meta)
    got = (torch.rand(4), np.random.rand(4), np.random.randn(3), random.random(), random.gauss(0, 1))
    assert torch.equal(want[0], got[0]) and np.array_equal(want[1], got[1]) and np.array_equal(want[2], got[2])
    assert want[3:] == got[3:]


def test_loading_never_unpickles(tmp_path, monkeypatch):
    m = _model()
    _write(tmp_path, 1, m)

    def refuse(*a, **k):
        raise AssertionError("torch.load (pickle) must never be used")

    monkeypatch.setattr(torch, "load", refuse)
    import pickle
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    loaded = checkpoint.load(tmp_path, require=())
    loaded.load_weights(_model())
    loaded.group("extra")


def test_safetensors_files_get_the_mode_of_the_json_beside_them(tmp_path):
    old = os.umask(0o022)  # safetensors alone writes 0600 whatever the umask
    try:
        path = _write(tmp_path, 1, _model())
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()}
    assert modes == dict.fromkeys(["extra.safetensors", "meta.json", "model.safetensors"], 0o644), modes
