"""The bad-input catalogue for the commands beside `tfamily train`: `rl train | sweep | table`,
`repro`, config files (alias bombs, deep nesting), the GCIDE task, options a member would ignore
and checkpoints edited inside their sections. Each row is one kind of bad input answered by a
one-line error (exit status 2, no traceback) holding every listed word: the value and the fix."""
from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tfamily import cli
from tfamily.rl.toy import ID
from tfamily.train import checkpoint

RL = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
      "--d-model", "8", "--layers", "1", "--set", "eval_episodes=4", "--no-progress"]
LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1"]
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


@dataclass
class Row:
    id: str
    argv: list
    words: list
    setup: Callable | None = None   # (tmp_path, paths) -> extra placeholders
    lines: int = 1                  # stderr lines (a checkpoint fallback adds 'skipping' notes)


def _edit_all(run: Path, edit: Callable[[dict], None]) -> None:
    for ck in (run / "checkpoints").glob("step-*"):
        meta = json.loads((ck / "meta.json").read_text())
        edit(meta)
        (ck / "meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    """Bad files, one finished RL run and one LM run (two checkpoints each), shared by every row."""
    d = tmp_path_factory.mktemp("commands")
    (d / "bomb.yaml").write_text(BOMB)
    (d / "deep.yaml").write_text("train: " + "[" * 3000 + "]" * 3000 + "\n")
    (d / "deep.toml").write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    good = gzip.compress(b"".join(b"%d\n" % i for i in range(40_000)))
    (d / "gcide_trunc.gz").write_bytes(good[: len(good) // 2])
    (d / "gcide_bad.gz").write_bytes(b"not gzip at all")
    assert cli.main(["rl", "train", *RL, "--steps", "32", "--ckpt-every", "2", "--out", str(d / "rl")]) == 0
    assert cli.main(["train", *LM, "--steps", "2", "train.ckpt_every=1", "--out", str(d / "lm")]) == 0
    return {"dir": str(d), "rl": str(d / "rl"), "lm": str(d / "lm")}


def _copy(src: str, tmp_path: Path) -> Path:
    dst = tmp_path / Path(src).name
    shutil.copytree(src, dst)
    return dst


def rl_copy(tmp_path, paths):
    return {"bad": str(_copy(paths["rl"], tmp_path))}


def rl_without_starts(tmp_path, paths):
    from safetensors.torch import load_file, save_file
    run = _copy(paths["rl"], tmp_path)
    for ck in (run / "checkpoints").glob("step-*"):
        tensors = load_file(ck / "data.safetensors")
        tensors.pop("starts")
        save_file(tensors, str(ck / "data.safetensors"))
        meta = json.loads((ck / "meta.json").read_text())
        meta["files"]["data.safetensors"] = {"bytes": (ck / "data.safetensors").stat().st_size,
                                             "sha256": checkpoint.sha256(ck / "data.safetensors")}
        (ck / "meta.json").write_text(json.dumps(meta))
    return {"bad": str(run)}


def lm_section(section: str):
    def setup(tmp_path, paths):
        run = _copy(paths["lm"], tmp_path)
        _edit_all(run, lambda m: m.update({section: {}}))
        return {"bad": str(run)}
    setup.__name__ = f"lm_empty_{section}"
    return setup


def lm_newer(tmp_path, paths):
    run = _copy(paths["lm"], tmp_path)
    _edit_all(run, lambda m: m.update(format_version=99))
    return {"bad": str(run)}


def lm_deep_meta(tmp_path, paths):
    run = _copy(paths["lm"], tmp_path)
    for ck in (run / "checkpoints").glob("step-*"):
        (ck / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    return {"bad": str(run)}


def sweep_deep_plan(tmp_path, paths):
    run = tmp_path / "sweep" / ID.replace("/", "_") / "lstm-s0"
    run.mkdir(parents=True)
    (run / "plan.json").write_text('{"env": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return {"bad": str(tmp_path / "sweep")}


RESUME = ["rl", "train", "--resume", "{bad}"]
ROWS = [
    # -- rl train --resume: every flag honoured or refused --------------------------------
    Row("rl resume --member", [*RESUME, "--member", "gtrxl"], ["member 'lstm'", "'gtrxl'", "drop --member"],
        rl_copy),
    Row("rl resume --out", [*RESUME, "--out", "{dir}/elsewhere"], ["own directory", "elsewhere",
                                                                    "copy its directory"], rl_copy),
    Row("rl resume --seed", [*RESUME, "--seed", "3"], ["seed 0", "not 3", "drop --seed"], rl_copy),
    Row("rl resume --env", [*RESUME, "--env", "CartPole-v1"], [ID, "'CartPole-v1'", "drop --env"], rl_copy),
    Row("rl resume --lr", [*RESUME, "--lr", "0.001"], ["lr 0.0005", "0.001", "drop --lr"], rl_copy),
    Row("rl resume --d-model", [*RESUME, "--d-model", "16"], ["d_model 8", "16", "drop --d-model"], rl_copy),
    Row("rl resume --set ent_coef", [*RESUME, "--set", "ent_coef=0.5"], ["ent_coef 0.01", "0.5"], rl_copy),
    Row("rl resume --set unknown", [*RESUME, "--set", "entropy=1"], ["unknown rl setting", "entropy", "ent_coef"],
        rl_copy),
    Row("rl resume --steps below", [*RESUME, "--steps", "16"], ["32 environment steps", "--steps reaches no "
                                                                "further (16)", "N > 32"], rl_copy),
    Row("rl resume a finished run", [*RESUME], ["its --steps", "nothing to train", "N > 32"], rl_copy),
    Row("rl resume without starts", [*RESUME, "--steps", "64"], ["lacks 'starts'", "edited",
                                                                 "earlier checkpoint"], rl_without_starts,
        lines=2),  # after the run's start-up line
    # -- rl settings validated before training -----------------------------------------------
    Row("rl ckpt-every negative", ["rl", "train", *RL, "--steps", "32", "--ckpt-every", "-1"],
        ["--ckpt-every", ">= 1", "-1"]),
    Row("rl ckpt-every 0", ["rl", "train", *RL, "--steps", "32", "--ckpt-every", "0"], ["--ckpt-every", "got 0",
                                                                                        "leave it out"]),
    Row("rl lr inf", ["rl", "train", *RL, "--steps", "32", "--lr", "inf"], ["--lr", "finite", "inf"]),
    Row("rl lr nan", ["rl", "train", *RL, "--steps", "32", "--lr", "nan"], ["--lr", "nan"]),
    Row("rl lr negative", ["rl", "train", *RL, "--steps", "32", "--lr", "-1"], ["--lr", "> 0", "-1"]),
    Row("rl ent_coef nan", ["rl", "train", *RL, "--steps", "32", "--set", "ent_coef=nan"], ["ent_coef", "nan",
                                                                                            "finite"]),
    Row("rl vf_coef inf", ["rl", "train", *RL, "--steps", "32", "--set", "vf_coef=inf"], ["vf_coef", "inf"]),
    Row("rl heads 0", ["rl", "train", *RL, "--member", "gtrxl", "--steps", "32", "--heads", "0"],
        ["--heads", ">= 1", "got 0"]),
    Row("rl layers 0", ["rl", "train", *RL, "--steps", "32", "--layers", "0"], ["--layers", "got 0"]),
    Row("rl mem-len negative", ["rl", "train", *RL, "--steps", "32", "--mem-len", "-2"], ["--mem-len", "-2"]),
    Row("rl seed negative", ["rl", "train", *RL, "--steps", "32", "--seed", "-1"], ["--seed", "-1"]),
    Row("rl d-model 1e9", ["rl", "train", *RL, "--steps", "32", "--d-model", "1000000000"],
        ["cannot fit", "--d-model=1000000000", "RAM"]),
    Row("rl n-envs 1e8", ["rl", "train", *RL, "--steps", "32", "--n-envs", "100000000"],
        ["cannot fit", "--n-envs=100000000"]),
    Row("rl sweep threads 0", ["rl", "sweep", "--envs", ID, "--members", "lstm", "--steps", "32", "--out",
                               "{dir}/sw", "--threads", "0"], ["--threads", "got 0", ">= 1"]),
    Row("rl table deep plan.json", ["rl", "table", "{bad}"], ["plan.json", "nests too deeply"], sweep_deep_plan),
    # -- repro ----------------------------------------------------------------------------
    Row("repro act-parity threads -1", ["repro", "act-parity", "--threads", "-1"], ["--threads", "got -1"]),
    Row("repro sparse-text seq-len 0", ["repro", "sparse-text", "--seq-len", "0", "--out", "{dir}/st"],
        ["--seq-len", ">= 1", "got 0"]),
    Row("repro sparse-text heads not dividing", ["repro", "sparse-text", "--steps", "1", "--d-model", "30",
                                                 "--heads", "4", "--members", "gpt", "--out", "{dir}/st2"],
        ["training gpt", "d_model=30", "n_heads=4", "--heads"], lines=2),  # after its progress line
    Row("repro reverse-dictionary truncated gcide", ["repro", "reverse-dictionary", "--gcide",
                                                     "{dir}/gcide_trunc.gz", "--out", "{dir}/rd"],
        ["gcide_trunc.gz", "corrupt or truncated", "replace it"], lines=2),
    # -- config files ---------------------------------------------------------------------
    Row("yaml alias bomb", ["train", *LM, "-c", "{dir}/bomb.yaml"], ["bomb.yaml", "expands to more than",
                                                                     "aliases"]),
    Row("yaml nested 3000 deep", ["train", *LM, "-c", "{dir}/deep.yaml"], ["deep.yaml", "nests deeper than 64"]),
    Row("toml nested 3000 deep", ["train", *LM, "-c", "{dir}/deep.toml"], ["deep.toml", "nests too deeply"]),
    Row("override nested 3000 deep", ["train", *LM, "train.lr=" + "[" * 3000 + "]" * 3000], ["nests deeper"]),
    Row("meta.json nested 1e5 deep", ["eval", "{bad}"], ["meta.json is corrupt", "nests too deeply"],
        lm_deep_meta, lines=3),
    # -- data tasks -----------------------------------------------------------------------
    Row("gcide truncated", ["train", "member=luong_attention", "data.corpus=null", "data.task=reverse_dictionary",
                            "data.task_params={path: '{dir}/gcide_trunc.gz'}"],
        ["reverse_dictionary", "gcide_trunc.gz", "corrupt or truncated"]),
    Row("gcide not gzip", ["train", "member=luong_attention", "data.corpus=null", "data.task=reverse_dictionary",
                           "data.task_params={path: '{dir}/gcide_bad.gz'}"], ["gcide_bad.gz", "not a readable gzip"]),
    # -- options the member would ignore ---------------------------------------------------
    Row("lstm_lm with a sliding window", ["train", "member=lstm_lm", "model.pattern.name=sliding_window"],
        ["model.pattern 'sliding_window'", "would do nothing", "'lstm'", "drop"]),
    Row("lstm_lm with kernel lsh", ["train", "member=lstm_lm", "model.kernel.name=lsh"],
        ["model.kernel 'lsh'", "would do nothing"]),
    Row("gru_lm with a feed-forward", ["train", "member=gru_lm", "model.ff.d_ff=64"], ["model.ff", "'gru'"]),
    Row("lstm_lm with post_norm", ["train", "member=lstm_lm", "model.residual.name=post_norm"],
        ["model.residual 'post_norm'"]),
    # -- attention masks that cannot fit ---------------------------------------------------
    Row("sliding window at 200000", ["train", *LM, "train.batch_size=1", "data.corpus=kjv", "data.seq_len=200000",
                                     "model.position.name=sinusoidal", "model.pattern.name=sliding_window"],
        ["cannot fit", "200000 x 200000", "'sliding_window'", "model.kernel.name=blocksparse"]),
    # -- checkpoints edited inside their sections ------------------------------------------
    Row("eval: meta source {}", ["eval", "{bad}"], ["section 'source' lacks", "seq_len", "edited"],
        lm_section("source"), lines=3),
    Row("generate: meta source {}", ["generate", "{bad}", "--tokens", "4"], ["section 'source' lacks"],
        lm_section("source"), lines=3),
    Row("resume: meta metrics {}", ["train", "--resume", "{bad}", "--steps", "4"],
        ["section 'metrics' lacks", "train_loss"], lm_section("metrics"), lines=3),
    Row("eval: meta metrics {}", ["eval", "{bad}"], ["section 'metrics' lacks"], lm_section("metrics"), lines=3),
    Row("eval: a newer format_version", ["eval", "{bad}"], ["format_version 99", "newer", "upgrade tfamily"],
        lm_newer, lines=3),
    Row("eval: meta config {}", ["eval", "{bad}"], ["section 'config' lacks", "'train'"], lm_section("config"),
        lines=3),
]


def _fill(arg: str, subs: dict) -> str:
    for k, v in subs.items():
        arg = arg.replace("{" + k + "}", v)
    return arg


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_command_bad_input_is_one_line_naming_the_value_and_the_fix(row, paths, tmp_path, capsys):
    subs = dict(paths)
    if row.setup is not None:
        subs.update(row.setup(tmp_path, paths))
    argv = [_fill(a, subs) for a in row.argv]
    if argv[0] == "train" and "--resume" not in argv:
        argv += ["--steps", "1", "--out", str(tmp_path / "out")]
    if argv[:2] == ["rl", "train"] and "--resume" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) <= row.lines, err
    last = err.splitlines()[-1]
    assert last.startswith(f"tfamily {argv[0]}: error: "), err
    for w in row.words:
        assert w in last, (w, last)
