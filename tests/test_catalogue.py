"""The bad-input catalogue (issue 13): every kind of bad input a new user may give the CLI or
the API, each answered by a one-line error that names the bad value and the fix (exit status
2 for the CLI, no traceback), or by a documented behaviour (tests/test_catalogue_behaviour.py).

Each row is one kind of bad input. CLI rows run ``tfamily.cli.main`` in-process; ``{name}``
in an argument is replaced by a path from the ``paths`` fixture (files and run directories
built once per module). API rows call the library and expect ValueError/TypeError (or the
named subclass) whose message holds every listed word.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tfamily import cli

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "train.warmup=1", "--steps", "2"]


@dataclass
class Case:
    id: str
    argv: list
    words: list
    setup: Callable | None = None   # (tmp_path, paths) -> extra placeholders
    tiny: bool = True               # train/demo rows: prepend TINY
    code: int = 2
    lines: int = 1                  # stderr lines (a fallback may add a 'skipping' note)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    """Bad files and one small trained run (two checkpoints) shared by every row."""
    d = tmp_path_factory.mktemp("catalogue")
    (d / "empty.txt").write_bytes(b"")
    (d / "short.txt").write_text("to be or not to be " * 20)   # 380 chars: val split 19 tokens
    (d / "text.txt").write_text("a plain file, not a directory\n")
    (d / "notgzip.gz").write_bytes(b"this is not gzip data")
    good = gzip.compress(os.urandom(50_000).hex().encode())
    (d / "truncated.gz").write_bytes(good[: len(good) // 2])
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    (d / "crc.gz").write_bytes(bytes(flipped))
    (d / "adir").mkdir()
    (d / "bad.yaml").write_text("train: {lr: [1, 2\n")
    (d / "list.yaml").write_text("- 1\n- 2\n")
    (d / "section.yaml").write_text("optimizer: {lr: 1}\n")
    (d / "trainstr.yaml").write_text("train: fast\n")
    (d / "bad.toml").write_text("[train\nlr = 1\n")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 8)
    run = d / "run"
    argv = ["train", *TINY[:-2], "--steps", "4", "train.ckpt_every=2", "train.eval_every=4",
            "--out", str(run)]
    assert cli.main(argv) == 0
    return {"dir": str(d), "run": str(run), **{p.stem + p.suffix.replace(".", "_"): str(p) for p in d.iterdir()}}


def _copy_run(tmp_path: Path, paths: dict) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(paths["run"], dst)
    return dst


def _newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step-*"))[-1]


def _edit_meta(run: Path, edit: Callable[[dict], None], every: bool = True) -> None:
    for ck in sorted((run / "checkpoints").glob("step-*")) if every else [_newest(run)]:
        meta = json.loads((ck / "meta.json").read_text())
        edit(meta)
        (ck / "meta.json").write_text(json.dumps(meta))


def corrupt_header(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    for ck in (run / "checkpoints").glob("step-*"):
        f = ck / "model.safetensors"
        data = bytearray(f.read_bytes())
        data[8:16] = b"\x00garbage"
        f.write_bytes(bytes(data))
    return {"bad": str(run)}


def truncated_weights(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    for ck in (run / "checkpoints").glob("step-*"):
        f = ck / "model.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    return {"bad": str(run)}


def meta_missing_spec(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    _edit_meta(run, lambda m: m.pop("spec"))
    return {"bad": str(run)}


def meta_missing_files(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    _edit_meta(run, lambda m: m.pop("files"))
    return {"bad": str(run)}


def meta_outside_file(tmp_path, paths):
    run = _copy_run(tmp_path, paths)

    def edit(m):
        m["files"]["../../../etc/passwd"] = {"bytes": 1, "sha256": "0" * 64}
    _edit_meta(run, edit)
    return {"bad": str(run)}


def meta_absolute_file(tmp_path, paths):
    run = _copy_run(tmp_path, paths)

    def edit(m):
        m["files"]["/etc/hostname"] = m["files"].pop("optimizer.safetensors")
    _edit_meta(run, edit)
    return {"bad": str(run)}


def meta_other_shape(tmp_path, paths):
    run = _copy_run(tmp_path, paths)

    def edit(m):
        m["spec"]["d_model"] = 48
        m["spec"]["heads"]["n_heads"] = 3
    _edit_meta(run, edit)
    return {"bad": str(run)}


def meta_bad_step(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    _edit_meta(run, lambda m: m.update(step="four"))
    return {"bad": str(run)}


def meta_not_json(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    for ck in (run / "checkpoints").glob("step-*"):
        (ck / "meta.json").write_text("{ not json")
    return {"bad": str(run)}


def meta_format(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    _edit_meta(run, lambda m: m.update(format=99))
    return {"bad": str(run)}


def no_checkpoints(tmp_path, paths):
    (tmp_path / "empty_run").mkdir()
    return {"bad": str(tmp_path / "empty_run")}


def out_is_file(tmp_path, paths):
    (tmp_path / "file").write_text("x")
    return {"out": str(tmp_path / "file")}


def out_under_file(tmp_path, paths):
    (tmp_path / "file").write_text("x")
    return {"out": str(tmp_path / "file" / "run")}


def out_has_checkpoints(tmp_path, paths):
    return {"out": str(_copy_run(tmp_path, paths))}


def finished_run(tmp_path, paths):
    return {"bad": str(_copy_run(tmp_path, paths))}


def invalid_saved_config(tmp_path, paths):
    run = _copy_run(tmp_path, paths)
    _edit_meta(run, lambda m: m["config"]["train"].update(lr="fast"))
    return {"bad": str(run)}


TRAIN = "train"
CLI_CASES = [
    # -- silently accepted before: now refused or honoured --------------------------------
    Case("grad_clip=0", [TRAIN, "train.grad_clip=0"], ["train.grad_clip=0", "train.grad_clip=null"]),
    Case("time_budget=nan", [TRAIN, "train.time_budget=.nan"], ["train.time_budget", "nan", "5m"]),
    Case("time_budget=inf", [TRAIN, "train.time_budget=.inf"], ["train.time_budget", "inf", "finite"]),
    Case("--time nan", [TRAIN, "--time", "nan"], ["train.time_budget='nan'", "5m"]),
    Case("data-dir is a file", [TRAIN, "--data-dir", "{text_txt}"], ["--data-dir", "text.txt", "not a directory"]),
    Case("data-dir missing", [TRAIN, "--data-dir", "{dir}/nowhere"], ["--data-dir", "nowhere", "does not exist",
                                                                     "$TFAMILY_DATA"]),
    Case("eval data-dir missing", ["eval", "{run}", "--data-dir", "{dir}/nowhere"], ["nowhere", "does not exist"]),
    Case("demo data-dir is a file", ["demo", "--data-dir", "{text_txt}"], ["text.txt", "not a directory"],
         tiny=False),
    Case("resume with --out", [TRAIN, "--resume", "{bad}", "--out", "{dir}/elsewhere", "--steps", "9"],
         ["--out", "elsewhere", "copy its directory"], setup=finished_run, tiny=False),
    Case("resume with --seed", [TRAIN, "--resume", "{bad}", "--seed", "5", "--steps", "9"],
         ["seed 0", "5", "drop --seed"], setup=finished_run, tiny=False),
    Case("resume with --steps below", [TRAIN, "--resume", "{bad}", "--steps", "3"],
         ["step 4", "--steps is 3", "N > 4"], setup=finished_run, tiny=False),
    Case("resume a finished run", [TRAIN, "--resume", "{bad}"], ["step 4", "train.max_steps is 4", "N > 4"],
         setup=finished_run, tiny=False),
    Case("resume with train.out=", [TRAIN, "--resume", "{bad}", "train.out={dir}/x", "--steps", "9"],
         ["train.out", "copy its directory"], setup=finished_run, tiny=False),
    Case("resume with -c", [TRAIN, "--resume", "{run}", "-c", "demo"], ["--resume", "drop -c/--config"],
         tiny=False),
    Case("resume nowhere", [TRAIN, "--resume", "/nonexistent/run"], ["/nonexistent/run", "does not exist"],
         tiny=False),
    Case("resume a dir without checkpoints", [TRAIN, "--resume", "{bad}"], ["no complete checkpoint"],
         setup=no_checkpoints, tiny=False),
    Case("run name ../", [TRAIN, "name=../../escape"], ["name='../../escape'", "train.out=DIR"]),
    Case("run name with /", [TRAIN, "name=a/b"], ["name='a/b'", "no '/'"]),
    Case("run name absolute", [TRAIN, "name=/tmp/x"], ["name='/tmp/x'"]),
    Case("run name hidden", [TRAIN, "name=.x"], ["name='.x'", "leading '.'"]),
    Case("run name ..", [TRAIN, "name=.."], ["name='..'"]),
    Case("run name not a string", [TRAIN, "name=[1, 2]"], ["name=[1, 2]"]),
    # -- sizes that cannot fit: refused before building -----------------------------------
    Case("d_model 1e9", [TRAIN, "model.d_model=1000000000"], ["cannot fit", "d_model=1000000000", "RAM"]),
    Case("vocab 1e10", [TRAIN, "model.vocab_size=10000000000"], ["cannot fit", "vocab_size=10000000000"]),
    Case("1e8 layers", [TRAIN, "model.depth.n_layers=100000000"], ["cannot fit", "n_layers=100000000"]),
    Case("batch 1e8", [TRAIN, "train.batch_size=100000000"], ["cannot fit", "batch_size=100000000",
                                                              "activations"]),
    Case("d_ff 1e11", [TRAIN, "model.ff.d_ff=100000000000"], ["cannot fit", "d_ff=100000000000"]),
    Case("seq_len 1e9", [TRAIN, "data.seq_len=1000000000", "model.position.name=sinusoidal"],
         ["data.seq_len + 1", "lower data.seq_len"]),
    # -- data ----------------------------------------------------------------------------
    Case("gzip not gzip", [TRAIN, "data.corpus={notgzip_gz}"], ["notgzip.gz", "corrupt or truncated"]),
    Case("gzip truncated", [TRAIN, "data.corpus={truncated_gz}"], ["truncated.gz", "ended before",
                                                                  "corrupt or truncated"]),
    Case("gzip stream damaged", [TRAIN, "data.corpus={crc_gz}"], ["crc.gz", "corrupt or truncated"]),
    Case("empty corpus", [TRAIN, "data.corpus={empty_txt}"], ["empty.txt", "is empty"]),
    Case("corpus is a directory", [TRAIN, "data.corpus={adir}"], ["adir", "without a manifest.json", "data prepare"]),
    Case("corpus file missing", [TRAIN, "data.corpus={dir}/missing.txt"], ["missing.txt", "does not exist"]),
    Case("unknown corpus", [TRAIN, "data.corpus=nosuchcorpus"], ["unknown corpus 'nosuchcorpus'",
                                                                 "tinyshakespeare"]),
    Case("val split shorter than seq_len", [TRAIN, "data.corpus={short_txt}", "data.seq_len=48"],
         ["val split", "short.txt", "19 tokens", "lower data.seq_len"]),
    Case("train split shorter than seq_len", [TRAIN, "data.corpus={short_txt}", "data.seq_len=400",
                                              "model.position.max_len=512"], ["lower data.seq_len"]),
    Case("binary file as char vocab", [TRAIN, "data.corpus={binary_txt}", "data.vocab=char"],
         ["binary.txt", "not valid UTF-8", "vocab='byte'"]),
    Case("unknown vocab", [TRAIN, "data.vocab=word"], ["data.vocab='word'", "byte, char"]),
    Case("neither corpus nor task", [TRAIN, "data.corpus=null"], ["exactly one of data.corpus", "data.task"]),
    Case("both corpus and task", [TRAIN, "data.task=copy"], ["exactly one of data.corpus", "task='copy'"]),
    Case("unknown task", [TRAIN, "data.corpus=null", "data.task=sorting"], ["sorting", "copy"]),
    Case("task_params not a mapping", [TRAIN, "data.task_params=3"], ["data.task_params", "mapping"]),
    Case("seq_len 0", [TRAIN, "data.seq_len=0"], ["data.seq_len", ">= 1", "0"]),
    Case("eval split unknown", [TRAIN, "data.eval_split=dev"], ["data.eval_split='dev'", "val, test"]),
    Case("stream not a bool", [TRAIN, "data.stream=maybe"], ["data.stream", "true or false", "maybe"]),
    Case("unknown data key", [TRAIN, "data.corpuss=kjv"], ["unknown data key", "corpuss", "corpus"]),
    # -- training settings ---------------------------------------------------------------
    Case("lr=inf", [TRAIN, "train.lr=inf"], ["train.lr", "finite", "inf"]),
    Case("lr=.inf", [TRAIN, "train.lr=.inf"], ["train.lr", "finite"]),
    Case("lr=nan", [TRAIN, "train.lr=nan"], ["train.lr", "nan"]),
    Case("lr=0", [TRAIN, "train.lr=0"], ["train.lr", "> 0", "got 0"]),
    Case("lr negative", [TRAIN, "train.lr=-1e-3"], ["train.lr", "-0.001"]),
    Case("lr a word", [TRAIN, "train.lr=fast"], ["train.lr", "'fast'"]),
    Case("seed too large", [TRAIN, "--seed", "99999999999999999999999"], ["train.seed", "99999999999999999999999",
                                                                          "[0, "]),
    Case("seed negative", [TRAIN, "train.seed=-1"], ["train.seed", "in [0, ", "-1"]),
    Case("seed a float", [TRAIN, "train.seed=1.5"], ["train.seed", "integer", "1.5"]),
    Case("grad_clip negative", [TRAIN, "train.grad_clip=-1"], ["train.grad_clip", "-1"]),
    Case("grad_clip inf", [TRAIN, "train.grad_clip=inf"], ["train.grad_clip", "finite"]),
    Case("batch_size 0", [TRAIN, "train.batch_size=0"], ["train.batch_size", ">= 1", "0"]),
    Case("batch_size float", [TRAIN, "train.batch_size=2.5"], ["train.batch_size", "2.5"]),
    Case("accum 0", [TRAIN, "train.accum=0"], ["train.accum", ">= 1"]),
    Case("max_steps 0", [TRAIN, "--steps", "0"], ["train.max_steps", ">= 1", "0"]),
    Case("no end", [TRAIN, "train.max_steps=null"], ["set train.max_steps or train.time_budget"], tiny=False),
    Case("warmup negative", [TRAIN, "train.warmup=-5"], ["train.warmup", "-5"]),
    Case("min_lr_ratio 2", [TRAIN, "train.min_lr_ratio=2"], ["train.min_lr_ratio", "[0.0, 1.0]", "2"]),
    Case("betas one value", [TRAIN, "train.betas=[0.9]"], ["train.betas", "two numbers", "[0.9]"]),
    Case("betas >= 1", [TRAIN, "train.betas=[1.0, 0.9]"], ["train.betas", "[0, 1)"]),
    Case("eps negative", [TRAIN, "train.eps=-1"], ["train.eps", "-1"]),
    Case("weight_decay inf", [TRAIN, "train.weight_decay=inf"], ["train.weight_decay", "finite"]),
    Case("precision fp8", [TRAIN, "train.precision=fp8"], ["train.precision='fp8'", "auto, bf16, fp16, fp32"]),
    Case("device tpu", [TRAIN, "train.device=tpu"], ["train.device='tpu'", "cuda:N"]),
    Case("compile maybe", [TRAIN, "train.compile=maybe"], ["train.compile", "true or false"]),
    Case("threads 0", [TRAIN, "train.threads=0"], ["train.threads", ">= 1"]),
    Case("keep 0", [TRAIN, "train.keep=0"], ["train.keep", ">= 1"]),
    Case("eval_every 0", [TRAIN, "train.eval_every=0"], ["train.eval_every", "or null"]),
    Case("ckpt_every -1", [TRAIN, "train.ckpt_every=-1"], ["train.ckpt_every", "-1"]),
    Case("unknown train key", [TRAIN, "train.learning_rate=1"], ["unknown train key", "learning_rate", "lr"]),
    Case("time budget word", [TRAIN, "--time", "soon"], ["train.time_budget='soon'", "5m"]),
    Case("time budget 0", [TRAIN, "--time", "0"], ["train.time_budget", "positive"]),
    Case("time budget negative", [TRAIN, "--time=-5m"], ["train.time_budget='-5m'", "5m"]),
    Case("time budget unit", [TRAIN, "--time", "5d"], ["train.time_budget='5d'", "1.5h"]),
    Case("out is a file", [TRAIN, "--out", "{out}"], ["--out", "file", "not a directory"], setup=out_is_file),
    Case("out under a file", [TRAIN, "--out", "{out}"], ["--out", "file/run", "pick a writable directory"],
         setup=out_under_file),
    Case("out holds a run", [TRAIN, "--out", "{out}"], ["already has checkpoints", "--resume"],
         setup=out_has_checkpoints),
    # -- model (spec) overrides ----------------------------------------------------------
    Case("unknown spec key", [TRAIN, "model.dmodel=64"], ["unknown spec key", "dmodel", "d_model"]),
    Case("unknown heads key", [TRAIN, "model.heads.n_kv=2"], ["unknown heads keys", "n_kv_heads"]),
    Case("d_model not divisible", [TRAIN, "model.d_model=30", "model.heads.n_heads=4"],
         ["d_model=30", "n_heads=4", "heads.d_head"]),
    Case("n_kv_heads not dividing", [TRAIN, "model.heads.n_kv_heads=3", "model.heads.n_heads=2"],
         ["n_kv_heads=3", "valid: [1, 2]"]),
    Case("n_heads 0", [TRAIN, "model.heads.n_heads=0"], ["heads.n_heads", ">= 1"]),
    Case("d_model float", [TRAIN, "model.d_model=32.5"], ["d_model", "integer", "32.5"]),
    Case("dropout 1.5", [TRAIN, "model.dropout=1.5"], ["dropout", "[0.0, 1.0)", "1.5"]),
    Case("unknown pattern", [TRAIN, "model.pattern.name=diagonal"], ["diagonal", "sliding_window"]),
    Case("unknown kernel", [TRAIN, "model.kernel.name=fast"], ["'fast'", "sdpa"]),
    Case("unknown position", [TRAIN, "model.position.name=rotary2"], ["rotary2", "sinusoidal"]),
    Case("unknown residual", [TRAIN, "model.residual.name=sandwich"], ["sandwich", "pre_norm"]),
    Case("unknown depth", [TRAIN, "model.depth.name=tower"], ["tower", "stack"]),
    Case("unknown state", [TRAIN, "model.state.name=lstm"], ["lstm", "kv_cache"]),
    Case("unknown activation", [TRAIN, "model.ff.activation=swishy"], ["swishy", "gelu"]),
    Case("ff chunks 0", [TRAIN, "model.ff.chunks=0"], ["ff.chunks", ">= 1"]),
    Case("mem_len negative", [TRAIN, "model.state.mem_len=-1"], ["state.mem_len", ">= 0"]),
    Case("per_layer not a list", [TRAIN, "model.pattern.per_layer=causal"], ["pattern.per_layer", "list",
                                                                              "'causal'"]),
    Case("per_layer entry not a dict", [TRAIN, "model.pattern.per_layer=[3]"], ["per_layer", "3"]),
    Case("unknown pattern param", [TRAIN, "model.pattern.name=sliding_window", "model.pattern.params={windw: 8}"],
         ["windw", "window"]),
    Case("unknown kernel param", [TRAIN, "model.kernel.params={tile: 8}"], ["tile", "sdpa"]),
    Case("unknown position param", [TRAIN, "model.position.params={base: 8}"], ["base"]),
    Case("unknown ff param", [TRAIN, "model.ff.params={gated: true}"], ["gated"]),
    Case("unknown objective param", [TRAIN, "model.objective.params={label_smoothing: 0.1}"],
         ["label_smoothing"]),
    Case("unknown depth param", [TRAIN, "model.depth.params={share: true}"], ["share"]),
    Case("unknown state param", [TRAIN, "model.state.params={size: 3}"], ["size"]),
    Case("unknown residual param", [TRAIN, "model.residual.name=gru_gate", "model.residual.params={bias: 2}"],
         ["bias", "gate_bias"]),
    Case("gate bias not a number", [TRAIN, "model.residual.name=gru_gate",
                                    "model.residual.params={gate_bias: high}"], ["gate_bias", "number", "'high'"]),
    Case("vocab_size below the data", [TRAIN, "model.vocab_size=10"], ["model.vocab_size=10", "65"]),
    Case("learned positions too short", [TRAIN, "model.position.name=learned", "model.position.max_len=16"],
         ["max_len=16", "data.seq_len"]),
    Case("reversible with post_norm", [TRAIN, "model.depth.name=reversible", "model.residual.name=post_norm"],
         ["reversible", "post_norm", "pre_norm"]),
    Case("xl memory on an encoder", [TRAIN, "member=bert", "model.state.name=xl_memory"],
         ["xl_memory", "decoder"]),
    Case("objective for another model", [TRAIN, "model.objective.name=seq2seq"], ["seq2seq", "decoder"]),
    Case("model section not a mapping", [TRAIN, "model=3"], ["'model'", "mapping"]),
    # -- command line syntax and config files --------------------------------------------
    Case("override without section", [TRAIN, "lr=3"], ["must start with one of", "train.lr"]),
    Case("override without =", [TRAIN, "train.lr"], ["'train.lr' is not key=value", "train.lr=3e-3"]),
    Case("override through a scalar", [TRAIN, "train.lr.x=3"], ["train.lr", "{'x': 3}"]),
    Case("unknown member", [TRAIN, "--member", "gtp"], ["unknown member 'gtp'", "gpt"]),
    Case("unknown config", [TRAIN, "-c", "nope"], ["config 'nope' not found", "available configs"]),
    Case("config not YAML", [TRAIN, "-c", "{bad_yaml}"], ["bad.yaml", "not valid YAML"]),
    Case("config not TOML", [TRAIN, "-c", "{bad_toml}"], ["bad.toml", "not valid TOML"]),
    Case("config a list", [TRAIN, "-c", "{list_yaml}"], ["list.yaml", "mapping"]),
    Case("config unknown section", [TRAIN, "-c", "{section_yaml}"], ["optimizer", "member, model, data, train"]),
    Case("config section a string", [TRAIN, "-c", "{trainstr_yaml}"], ["'train'", "mapping", "fast"],
         tiny=False),
    # -- eval and generate -----------------------------------------------------------------
    Case("eval nowhere", ["eval", "/nonexistent/run"], ["/nonexistent/run", "does not exist"]),
    Case("eval a file", ["eval", "{text_txt}"], ["text.txt", "is a file"]),
    Case("eval max-tokens 0", ["eval", "{run}", "--max-tokens", "0"], ["--max-tokens", ">= 1", "0"]),
    Case("eval batch-size 0", ["eval", "{run}", "--batch-size", "0"], ["--batch-size", ">= 1"]),
    Case("eval mem-len negative", ["eval", "{run}", "--mem-len", "-1"], ["--mem-len", ">= 0"]),
    Case("eval mem-len without memory", ["eval", "{run}", "--mem-len", "8"], ["--mem-len needs a memory model"]),
    Case("corrupt safetensors header", ["eval", "{bad}"], ["model.safetensors", "corrupt"],
         setup=corrupt_header, lines=3),
    Case("truncated weights", ["eval", "{bad}"], ["model.safetensors", "truncated"],
         setup=truncated_weights, lines=3),
    Case("meta without spec", ["eval", "{bad}"], ["lacks ['spec']", "corrupt"], setup=meta_missing_spec, lines=3),
    Case("meta without files", ["eval", "{bad}"], ["no valid 'files' table"], setup=meta_missing_files, lines=3),
    Case("meta names ../", ["eval", "{bad}"], ["'../../../etc/passwd'", "refusing"], setup=meta_outside_file,
         lines=3),
    Case("meta names /abs", ["eval", "{bad}"], ["'/etc/hostname'", "refusing"], setup=meta_absolute_file, lines=3),
    Case("meta step not a number", ["eval", "{bad}"], ["step 'four'"], setup=meta_bad_step, lines=3),
    Case("meta not JSON", ["eval", "{bad}"], ["meta.json is corrupt"], setup=meta_not_json, lines=3),
    Case("meta of another format", ["eval", "{bad}"], ["format 99", "format 1"], setup=meta_format, lines=3),
    Case("weights of another shape", ["eval", "{bad}"], ["does not fit this model", "size mismatch"],
         setup=meta_other_shape),
    Case("checkpoint config invalid", ["eval", "{bad}"], ["train.lr", "'fast'"], setup=invalid_saved_config),
    Case("generate nowhere", ["generate", "/nonexistent/run"], ["does not exist"]),
    Case("generate tokens negative", ["generate", "{run}", "--tokens", "-1"], ["--tokens", ">= 0"]),
    Case("generate --temperature 0", ["generate", "{run}", "--temperature", "0"], ["temperature", "> 0", "greedy"]),
    Case("generate top-k 0", ["generate", "{run}", "--top-k", "0"], ["top_k", ">= 1"]),
    Case("generate top-p 1.5", ["generate", "{run}", "--top-p", "1.5"], ["top_p", "(0, 1]"]),
    Case("generate prompt out of vocabulary", ["generate", "{run}", "--prompt", "\u00e9\u00e9"], ["'\u00e9'"]),
    Case("members unknown", ["members", "gtp"], ["unknown member 'gtp'"]),
    Case("download unknown", ["download", "nosuch"], ["nosuch", "enwik8"]),
]


def _fill(arg: str, subs: dict) -> str:
    for k, v in subs.items():
        arg = arg.replace("{" + k + "}", v)
    return arg


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_bad_input_is_one_line_naming_the_value_and_the_fix(case, paths, tmp_path, capsys):
    subs = dict(paths)
    if case.setup is not None:
        subs.update(case.setup(tmp_path, paths))
    argv = [_fill(a, subs) for a in case.argv]
    if argv[0] in ("train", "demo"):
        argv = [argv[0], *(TINY if case.tiny else []), *argv[1:]]
        if "--out" not in argv and "--resume" not in argv:
            argv += ["--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert cli.main(argv) == case.code
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) <= case.lines, err
    last = err.splitlines()[-1]
    assert last.startswith(f"tfamily {argv[0]}: error: "), err
    for w in case.words:
        assert w in last, (w, last)


def test_the_catalogue_holds_at_least_100_kinds():
    spec = importlib.util.spec_from_file_location("test_catalogue_api", Path(__file__).with_name("test_catalogue_api.py"))
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    API_CASES = api.API_CASES
    ids = [c.id for c in CLI_CASES] + [c[0] for c in API_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 100, len(ids)
