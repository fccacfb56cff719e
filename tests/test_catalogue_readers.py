"""The bad-input catalogue of the files tfamily reads (base/textload.py, the one bounded loader): a
config, a Hugging Face directory's JSON and tensors, a data file, a run's or a grid's own files.
Each is bounded before anything is allocated and answered by one line naming the file and the
fix (exit status 2 for the CLI, no traceback), or read as documented (a BOM, a long CSV field,
a corrupt cache rebuilt, a checkpoint with a corrupt vocabulary skipped)."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from tfamily import cli, members
from tfamily.base import textload
from tfamily.build import build

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.threads=1",
        "train.precision=fp32", "--steps", "2"]


def _hf(root: Path, name: str, **override) -> Path:
    from tfamily.export.hf import export_hf
    torch.manual_seed(0)
    spec = members.get(name)().override({"d_model": 16, "heads.n_heads": 2, "depth.n_layers": 2, "vocab_size": 40,
                                         **override})
    export_hf(build(spec), root / name)
    return root / name


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    """Two small Hugging Face directories (GPT-2 with a 32-row position table, Llama) and a trained run."""
    d = tmp_path_factory.mktemp("readers")
    gpt2 = _hf(d, "gpt", **{"position.max_len": 32})
    llama = _hf(d, "llama", **{"heads.n_kv_heads": 2, "ff.d_ff": 32})
    run = d / "run"
    assert cli.main(["train", *TINY[:-2], "--steps", "4", "train.ckpt_every=2", "train.eval_every=4",
                     "--out", str(run)]) == 0
    return {"dir": d, "gpt2": gpt2, "llama": llama, "run": run}


def _copy(paths, tmp_path, key: str) -> Path:
    dst = tmp_path / key
    shutil.copytree(paths[key], dst)
    return dst


def _config(d: Path, **kw) -> Path:
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**c, **kw}))
    return d


def _tensors(d: Path, edit: Callable[[dict], None]) -> Path:
    t = load_file(str(d / "model.safetensors"))
    edit(t)
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def _write(d: Path, name: str, data: str | bytes) -> Path:
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return d / name


DEEP = "[" * 100_000 + "]" * 100_000


@dataclass
class Case:
    id: str
    argv: list                        # '{x}' filled from setup's dict
    words: list
    setup: Callable                   # (tmp_path, paths) -> {placeholder: path}
    tiny: bool = False                # train rows: prepend TINY
    lines: int = 1


def gpt2(edit=None, **kw):
    def setup(tmp_path, paths):
        d = _copy(paths, tmp_path, "gpt2")
        _config(d, **kw) if kw else None
        edit(d) if edit else None
        return {"hf": d}
    return setup


def huge_layers(tmp_path, paths):
    return gpt2(n_layer=100_000_000)(tmp_path, paths)


def toml(text: str):
    def setup(tmp_path, paths):
        return {"cfg": _write(tmp_path, "c.toml", text)}
    return setup


def yaml_(text: str):
    def setup(tmp_path, paths):
        return {"cfg": _write(tmp_path, "c.yaml", text)}
    return setup


def big_toml(tmp_path, paths):
    f = tmp_path / "big.toml"
    with open(f, "w") as fh:
        fh.write('member = "gpt"\n')
        line = "# " + "x" * 1022 + "\n"
        fh.write(line * (17 * 1024))  # 17 MiB of comments: valid TOML, but no config is that large
    return {"cfg": f}


def data(name: str, content: str | bytes):
    def setup(tmp_path, paths):
        return {"data": _write(tmp_path, name, content)}
    return setup


def arena_cell(content: str):
    def setup(tmp_path, paths):
        cell = tmp_path / "arena" / "copy" / "gpt-s0"
        cell.mkdir(parents=True)
        _write(cell, "cell.json", content)
        return {"arena": tmp_path / "arena", "out": tmp_path / "merged"}
    return setup


def finished_run(edit: Callable[[Path], None]):
    def setup(tmp_path, paths):
        run = _copy(paths, tmp_path, "run")
        edit(run)
        return {"run": run}
    return setup


def rl_sweep(tmp_path, paths):
    run = tmp_path / "sweep" / "env" / "gru-s0"
    run.mkdir(parents=True)
    _write(run, "plan.json", "{}")
    return {"sweep": tmp_path / "sweep"}


CASES = [
    # -- bounded before allocating (a 200-byte config.json must not build 10^8 layers first)
    Case("convert: n_layer 1e8", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["config.json", "cannot fit", "n_layers=100000000"], huge_layers),
    Case("init-from: n_layer 1e8", ["train", "--init-from", "{hf}", "--out", "{tmp}/o"],
         ["config.json", "cannot fit"], huge_layers, tiny=True),
    Case("convert: more layers than the weights", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["config.json", "asks for 5 layers", "the weights hold 2"], gpt2(n_layer=5)),
    Case("init-from: more layers than the weights", ["train", "--init-from", "{hf}", "--out", "{tmp}/o"],
         ["asks for 5 layers", "the weights hold 2"], gpt2(n_layer=5), tiny=True),
    Case("convert: an integer weight", ["convert", "{hf}", "--out", "{tmp}/o"], ["wte.weight", "int32", "not a float"],
         gpt2(lambda d: _tensors(d, lambda t: t.update({"transformer.wte.weight":
                                                        t["transformer.wte.weight"].to(torch.int32)})))),
    Case("convert: a NaN weight", ["convert", "{hf}", "--out", "{tmp}/o"], ["h.0.ln_1.weight", "NaN"],
         gpt2(lambda d: _tensors(d, lambda t: t["transformer.h.0.ln_1.weight"].__setitem__(0, float("nan"))))),
    Case("init-from: an infinite weight", ["train", "--init-from", "{hf}", "--out", "{tmp}/o"],
         ["h.1.mlp.c_fc.weight", "infinite"],
         gpt2(lambda d: _tensors(d, lambda t: t["transformer.h.1.mlp.c_fc.weight"].__setitem__(0, float("inf")))),
         tiny=True),
    Case("convert: --seq-len beyond the position table", ["convert", "{hf}", "--out", "{tmp}/o", "--seq-len", "64"],
         ["--seq-len 64", "learned position table of 32 rows"], gpt2()),
    Case("TOML: a 2e5-element list", ["train", "--config", "{cfg}", "--out", "{tmp}/o"],
         ["c.toml", "more than 100000 values"], toml("[train]\nlr = [" + ",".join(["1"] * 200_000) + "]\n"),
         tiny=True),
    Case("TOML: 17 MiB", ["train", "--config", "{cfg}", "--out", "{tmp}/o"], ["big.toml", "bytes", "check the path"],
         big_toml, tiny=True),
    Case("YAML: a 2e5-element list names the value bound", ["train", "--config", "{cfg}", "--out", "{tmp}/o"],
         ["c.yaml", "more than 100000 values", "data file"], yaml_("train:\n  lr:\n" + "    - 1\n" * 200_000),
         tiny=True),
    Case("YAML: a key given twice", ["train", "--config", "{cfg}", "--out", "{tmp}/o"],
         ["c.yaml", "key 'train' twice", "line 2"], yaml_("train: {lr: 0.1}\ntrain: {lr: 0.2}\n"), tiny=True),
    Case("a 5000-element value is cut", ["train", "--config", "{cfg}", "--out", "{tmp}/o"],
         ["train.lr", "<a list of 5000 items>"], toml("[train]\nlr = [" + ",".join(["1"] * 5000) + "]\n"),
         tiny=True),
    Case("Llama rope_theta 'abc'", ["convert", "{hf}", "--out", "{tmp}/o"], ["config.json", "rope_theta='abc'", "number"],
         lambda tmp_path, paths: {"hf": _config(_copy(paths, tmp_path, "llama"),
                                                rope_parameters={"rope_type": "default", "rope_theta": "abc"})}),
    # -- every reader through the loader: one line naming the file
    Case("config.json nested 1e5 deep", ["convert", "{hf}", "--out", "{tmp}/o"], ["config.json", "nests too deeply"],
         gpt2(lambda d: _write(d, "config.json", DEEP))),
    Case("config.json model_type a list", ["convert", "{hf}", "--out", "{tmp}/o"], ["config.json", "model_type ['gpt2']"],
         gpt2(model_type=["gpt2"])),
    Case("config.json n_embd a string", ["convert", "{hf}", "--out", "{tmp}/o"], ["config.json", "d_model", "'16'"],
         gpt2(n_embd="16")),
    Case("config.json not UTF-8", ["convert", "{hf}", "--out", "{tmp}/o"], ["config.json", "not UTF-8", "byte 1 "],
         gpt2(lambda d: _write(d, "config.json", b'{\xff"model_type": "gpt2"}'))),
    Case("index.json nested 1e5 deep", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["model.safetensors.index.json", "nests too deeply"],
         gpt2(lambda d: _write(d, "model.safetensors.index.json", '{"weight_map": ' + DEEP + "}"))),
    Case("index.json weight_map of lists", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["model.safetensors.index.json", "weight_map entry 'a'", "string"],
         gpt2(lambda d: _write(d, "model.safetensors.index.json", '{"weight_map": {"a": [1]}}'))),
    Case("tokenizer.json nested 1e5 deep", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["tokenizer.json", "nests too deeply"], gpt2(lambda d: _write(d, "tokenizer.json", DEEP))),
    Case("tokenizer.json of the wrong shape", ["convert", "{hf}", "--out", "{tmp}/o"],
         ["gpt2/tokenizer.json", "not a valid tokenizer.json"], gpt2(lambda d: _write(d, "tokenizer.json", '{"added_tokens": 5}'))),
    Case("JSONL line nested 1e5 deep", ["train", "data.corpus={data}", "--out", "{tmp}/o"],
         ["rows.jsonl line 2", "nests too deeply"],
         data("rows.jsonl", '{"text": "a", "label": "x"}\n' + DEEP + "\n"), tiny=True),
    Case("JSONL not UTF-8", ["train", "data.corpus={data}", "--out", "{tmp}/o"],
         ["rows.jsonl", "not UTF-8", "byte 11 "], data("rows.jsonl", b'{"text": "a\xff", "label": "x"}\n'), tiny=True),
    Case("arena cell.json a list", ["arena", "merge", "{arena}", "--out", "{out}"], ["cell.json", "must be a mapping"],
         arena_cell("[1, 2]")),
    Case("arena cell.json task a number", ["arena", "merge", "{arena}", "--out", "{out}"],
         ["cell.json", "task=1", "string"], arena_cell('{"task": 1, "member": "gpt", "seed": 0}')),
    Case("arena cell.json nested deep", ["arena", "merge", "{arena}", "--out", "{out}"],
         ["cell.json", "nests too deeply"], arena_cell(DEEP)),
    Case("result.json of a run a list", ["compare", "{run}"], ["result.json", "must be a mapping"],
         finished_run(lambda r: _write(r, "result.json", "[]"))),
    Case("result.json steps a string", ["compare", "{run}"], ["result.json", "steps='4'"],
         finished_run(lambda r: _write(r, "result.json", json.dumps(
             {**json.loads((r / "result.json").read_text()), "steps": "4"})))),
    Case("config.yaml of a run with train: 5", ["compare", "{run}"], ["config.yaml", "train=5", "mapping"],
         finished_run(lambda r: _write(r, "config.yaml", "member: gpt\ntrain: 5\n"))),
    Case("rl table on a plan.json of {}", ["rl", "table", "{sweep}"], ["plan.json", "has no 'env'"], rl_sweep),
]


def _fill(arg: str, subs: dict) -> str:
    for k, v in subs.items():
        arg = arg.replace("{" + k + "}", str(v))
    return arg


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_file_is_one_line_naming_it(case, paths, tmp_path, capsys):
    subs = {"tmp": tmp_path, **case.setup(tmp_path, paths)}
    argv = [_fill(a, subs) for a in case.argv]
    if case.tiny:
        argv = [argv[0], *TINY, *argv[1:]]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) <= case.lines, err[:2000]
    last = err.splitlines()[-1]
    assert len(last) < 600, last[:2000]
    for w in case.words:
        assert w in last, (w, last)


# -- documented behaviour of the loader --------------------------------------------------------
def test_a_csv_field_over_128_kib_is_read_and_a_bom_is_stripped(tmp_path):
    from tfamily.train.tasks.labelled import read_rows
    long = "word " * 60_000  # 300 KB: csv's own field limit is 128 KiB
    f = _write(tmp_path, "rows.csv", "\ufefftext,label\n" + f"{long},pos\nshort,neg\n")
    rows = read_rows(f)
    assert [r["label"] for r in rows] == ["pos", "neg"] and rows[0]["text"] == long


def test_a_non_utf8_file_is_refused_with_its_byte_offset(tmp_path):
    f = _write(tmp_path, "x.json", b'\xef\xbb\xbf{"a": "\xe9"}')
    with pytest.raises(ValueError, match=r"x.json is not UTF-8 text \(byte 10 is b'\\xe9'\)"):
        textload.read_json(f)
    assert textload.read_json(_write(tmp_path, "y.json", b'\xef\xbb\xbf{"a": 1}')) == {"a": 1}


def test_a_corrupt_cached_bpe_tokenizer_is_named_and_rebuilt(tmp_path, monkeypatch, capsys):
    from tfamily.data.subword import train_bpe
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = "the cat sat on the mat; the dog sat on the log. " * 40
    first = train_bpe(text, 300)
    (cached,) = (tmp_path / "tfamily" / "bpe").glob("*.json")
    cached.write_text('{"model": ' * 3)
    again = train_bpe(text, 300)
    err = capsys.readouterr().err
    assert str(cached) in err and "corrupt" in err and "rebuilt" in err
    assert again.json == first.json and cached.read_text() == first.json


def test_a_checkpoint_with_a_corrupt_vocabulary_is_skipped(paths, tmp_path, capsys):
    run = _copy(paths, tmp_path, "run")
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    meta = json.loads((newest / "meta.json").read_text())
    meta["vocab"] = {"type": "tokenizer", "json": "{not a tokenizer"}
    (newest / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--max-tokens", "64", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert f"skipping {newest}" in err and "vocabulary cannot be read" in err


def test_a_200_byte_config_with_1e8_layers_is_refused_at_once_and_its_spec_still_read(paths, tmp_path):
    import time

    from tfamily.pretrained import PretrainedError, from_pretrained, spec_of
    d = _config(_copy(paths, tmp_path, "gpt2"), n_layer=100_000_000)
    assert spec_of(d).depth.n_layers == 100_000_000  # a description: nothing is built
    t = time.perf_counter()
    with pytest.raises(PretrainedError, match="cannot fit"):
        from_pretrained(d)
    assert time.perf_counter() - t < 5
