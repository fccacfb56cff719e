"""`tfamily export`: each format's artifact, loaded by its own runtime (torch.export.load,
torch.jit.load, onnxruntime), gives the eager model's logits on fresh random tokens at other
batch sizes and lengths than it was traced on; refusals and bad arguments are one line with
nothing written. An export never destroys data: an existing --out only with --force, never inside a
run's checkpoints, a full disk refused before writing, a failed writer's files removed. Every
member in every format is the slow test at the end."""
from __future__ import annotations

import errno
import importlib.util
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import tfamily
from tfamily import cli, members
from tfamily.export import graphs as export_module
from tfamily.export.graphs import FORMATS, export, input_names, load, refusal
from tfamily.train.sample import load_trained

HAS_ONNX = all(importlib.util.find_spec(p) for p in ("onnx", "onnxscript", "onnxruntime"))
NEEDS_ONNX = pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime are not installed "
                                                     "(pip install 'tfamily[export]')")
TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=32", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "train.warmup=1"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "run"
    assert cli.main(["train", *TINY, "--steps", "2", "--out", str(out), "--json"]) == 0
    return out


def _own_runtime(path, fmt):
    """The artifact loaded without tfamily's help."""
    if fmt == "pt2":
        return torch.export.load(str(path)).module()
    if fmt == "torchscript":
        return torch.jit.load(str(path))
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda tokens: torch.from_numpy(session.run(["logits"], {"tokens": tokens.numpy()})[0])


@pytest.mark.parametrize("fmt", [pytest.param(f, marks=NEEDS_ONNX) if f == "onnx" else f for f in FORMATS])
def test_export_gives_the_eager_logits_at_other_shapes(run_dir, tmp_path, capsys, fmt):
    out = tmp_path / f"gpt.{fmt}"
    assert cli.main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 0
    assert f"as {fmt} to {out}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary files left
    model, run = load_trained(run_dir, "cpu").model, _own_runtime(out, fmt)
    for b, n in ((5, 7), (1, 32), (2, 1)):  # traced on (2, 32); 32 is the position table's size
        tokens = torch.randint(0, model.spec.vocab_size, (b, n))
        with torch.no_grad():
            torch.testing.assert_close(run(tokens), model(tokens), atol=1e-4, rtol=1e-4)


def test_an_encoder_exports_as_pt2_and_an_encoder_decoder_as_torchscript(tmp_path):
    bert = tfamily.build(members.bert(d_model=16, vocab_size=11, heads__n_heads=2, depth__n_layers=1,
                                      position__max_len=16))
    export(bert, "pt2", tmp_path / "bert.pt2", seq_len=16)
    x = torch.randint(0, 11, (3, 9))
    torch.testing.assert_close(load(tmp_path / "bert.pt2", "pt2")(x), bert.eval()(x))
    vanilla = tfamily.build(members.vanilla(d_model=16, vocab_size=11, heads__n_heads=2, depth__n_layers=1))
    result = export(vanilla, "torchscript", tmp_path / "vanilla.pt", seq_len=12)
    assert result["inputs"] == ["src", "tgt"]
    src, tgt = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 8))
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "vanilla.pt"))(src, tgt), vanilla.eval()(src, tgt))


def test_members_that_cannot_export_are_refused_in_one_line_naming_the_member(tmp_path):
    reformer = members.reformer(d_model=16, vocab_size=11)
    assert "reformer cannot be exported: LSH attention" in refusal(reformer, "pt2")
    assert "lstm_lm exports as torchscript only" in refusal(members.lstm_lm(d_model=16, vocab_size=11), "onnx")
    assert refusal(members.lstm_lm(d_model=16, vocab_size=11), "torchscript") is None
    assert "recurrent decoder steps through the target" in refusal(members.luong_attention(), "torchscript")
    with pytest.raises(ValueError, match="reformer cannot be exported"):
        export(tfamily.build(reformer), "torchscript", tmp_path / "r.pt", seq_len=8)
    assert not list(tmp_path.iterdir())


def _error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tfamily export: error: "), err
    return err


def test_bad_arguments_are_one_line_and_write_nothing(run_dir, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(run_dir))
    assert "no complete checkpoint" in _error(capsys, ["export", str(empty), "--format", "pt2",
                                                         "--out", str(tmp_path / "m.pt2")])
    assert "does not exist" in _error(capsys, ["export", str(tmp_path / "nope"), "--format", "pt2",
                                                 "--out", str(tmp_path / "m.pt2")])
    assert "unknown export format 'tflite'; pick one of onnx, torchscript, pt2" in _error(
        capsys, ["export", str(run_dir), "--format", "tflite", "--out", str(tmp_path / "m.x")])
    assert "is a directory; name the file" in _error(capsys, ["export", str(run_dir), "--format", "pt2",
                                                               "--out", str(tmp_path)])
    assert "does not exist; create it" in _error(capsys, ["export", str(run_dir), "--format", "pt2",
                                                           "--out", str(tmp_path / "afile" / "m.pt2")])
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(run_dir))) == before


def _files(d: Path) -> list[str]:
    """Everything under ``d``, hidden files and directories too."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_an_existing_out_is_replaced_only_with_force(run_dir, tmp_path, capsys):
    out = tmp_path / "m.pt"
    out.write_text("keep me")
    err = _error(capsys, ["export", str(run_dir), "--format", "torchscript", "--out", str(out)])
    assert f"--out {out} exists; pass --force to replace it" in err
    assert out.read_text() == "keep me"
    assert cli.main(["export", str(run_dir), "--format", "torchscript", "--out", str(out), "--force"]) == 0
    torch.jit.load(str(out))
    hf = tmp_path / "hf"
    (hf / "keep").mkdir(parents=True)  # --force replaces a directory of files, never one holding directories
    assert "not an empty directory" in _error(capsys, ["export", str(run_dir), "--format", "hf", "--out", str(hf)])
    assert "holding keep/" in _error(capsys, ["export", str(run_dir), "--format", "hf", "--out", str(hf), "--force"])
    (hf / "keep").rmdir()
    (hf / "old.json").write_text("{}")
    assert cli.main(["export", str(run_dir), "--format", "hf", "--out", str(hf), "--force"]) == 0
    assert _files(tmp_path) == ["hf", "hf/config.json", "hf/model.safetensors", "m.pt"]


@pytest.mark.parametrize("fmt, name", [("torchscript", "m.pt"), ("hf", "hf")])
def test_out_inside_a_runs_checkpoints_is_refused_even_with_force(run_dir, capsys, fmt, name):
    before, ckpt = _files(run_dir), sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    for out in (run_dir / "checkpoints" / name, ckpt / name, ckpt / "sub" / name):
        err = _error(capsys, ["export", str(run_dir), "--format", fmt, "--out", str(out), "--force"])
        real = run_dir.resolve()
        assert f"inside the checkpoints of run {real}" in err and f"e.g. {real / 'export'}" in err, err
    assert _files(run_dir) == before


@pytest.mark.parametrize("fmt", ["torchscript", "pt2", "hf"])
def test_a_full_disk_is_refused_before_writing_in_one_line(run_dir, tmp_path, capsys, monkeypatch, fmt):
    monkeypatch.setattr(export_module, "free_bytes", lambda where: 5 << 20)
    out = tmp_path / "hf" / "mine" if fmt == "hf" else tmp_path / "m"
    err = _error(capsys, ["export", str(run_dir), "--format", fmt, "--out", str(out)])
    # The weights are 0.06 MiB: 16 MiB of margin.
    assert re.search(rf"No space left on device in {re.escape(str(out.parent))} for the {fmt} export "
                     rf"{out.name}: it needs about 16\.\d MiB \(5\.0 MiB free\)", err), err
    assert _files(tmp_path) == []  # hf's parents it created are gone too


def test_a_writer_failing_midway_leaves_nothing_behind(run_dir, tmp_path, capsys, monkeypatch):
    def half(model, args, path):
        path.write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setitem(export_module.WRITERS, "pt2", half)
    err = _error(capsys, ["export", str(run_dir), "--format", "pt2", "--out", str(tmp_path / "m.pt2")])
    assert f"No space left on device in {tmp_path} for the pt2 export m.pt2: it needs about" in err
    assert _files(tmp_path) == []

    def full(tensors, filename, metadata=None):  # safetensors' own error type on a full disk, not OSError
        Path(filename).write_bytes(b"x" * 1000)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("safetensors.torch.save_file", full)
    err = _error(capsys, ["export", str(run_dir), "--format", "hf", "--out", str(tmp_path / "hf" / "mine")])
    assert f"No space left on device in {tmp_path / 'hf'} for the hf export mine" in err
    assert _files(tmp_path) == []


def test_the_readmes_hf_export_command_works_as_printed(run_dir, tmp_path, monkeypatch, capsys):
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    command = re.search(r"`(tfamily export runs/mine --format hf --out hf/mine)`", readme).group(1)
    shutil.copytree(run_dir, tmp_path / "runs" / "mine")
    monkeypatch.chdir(tmp_path)
    assert cli.main(shlex.split(command)[1:]) == 0
    mode = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / "hf" / "mine").iterdir()}
    assert set(mode) == {"config.json", "model.safetensors"} and mode["model.safetensors"] == mode["config.json"]


# -- every member, every format ------------------------------------------------------------------
SMALL = dict(vocab_size=23, d_model=32, dropout=0.0, depth__n_layers=2)
PATTERNS = {  # small sparse patterns, so that they are really sparse at these lengths
    "sparse_transformer_strided": dict(name="strided", params=dict(stride=4, combine="heads")),
    "sparse_transformer_fixed": dict(name="fixed", params=dict(block=8, summary=2, combine="heads")),
    "longformer": dict(name="longformer", params=dict(window=4, n_global=1)),
    "bigbird": dict(name="bigbird", params=dict(block=4, n_random=1)),
    "image_transformer_1d": dict(name="local_1d", params=dict(block=4, memory=4)),
    "image_transformer_2d": dict(name="local_2d", params=dict(width=6, block_h=2, block_w=3, memory_h=2,
                                                               memory_w=1)),
    "adaptive_span": dict(name="adaptive_span", params=dict(max_span=16, ramp=4)),
}


def small(name: str):
    base = members.get(name)()
    kw = dict(SMALL, **({"heads__n_heads": 2} if base.choices()["heads"] != "none" else {}))
    if name in PATTERNS:
        kw["pattern"] = PATTERNS[name]
    if base.position.name == "learned":
        kw["position__max_len"] = 64
    return tfamily.build(members.get(name)(**kw))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [pytest.param(f, marks=NEEDS_ONNX) if f == "onnx" else f for f in FORMATS])
@pytest.mark.parametrize("name", [m["name"] for m in members.describe()])
def test_every_member_exports_or_is_refused(tmp_path, name, fmt):
    model = small(name)
    reason = refusal(model.spec, fmt)
    if reason:
        with pytest.raises(ValueError, match=name):
            export(model, fmt, tmp_path / "m", seq_len=48)
        return
    export(model, fmt, tmp_path / "m", seq_len=48)
    run = load(tmp_path / "m", fmt)
    for b, n in ((3, 40), (1, 5)):
        ids = [torch.randint(0, 23, (b, n + i)) for i in range(len(input_names(model)))]
        with torch.no_grad():
            torch.testing.assert_close(run(*ids), model(*ids), atol=1e-4, rtol=1e-4)


def test_the_commands_format_list_is_the_exporters():
    from tfamily.export.cli import FORMAT_NAMES
    assert FORMAT_NAMES == FORMATS
