"""The bad-input catalogue of `tfamily eval RUN --data` and `tfamily predict`: data the run cannot read
with its vocabulary, a converted run with no corpus, a labelled file for a language model (and text
for a classifier), labels the run never had, a file too small for a test split, a run that is no text
classifier. Each row: one line naming the value and the fix, exit status 2, nothing written."""
from __future__ import annotations

import os

import pytest
import torch

from tfamily import cli
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

LM = ["model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1", "model.position.max_len=64",
      "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256", "train.progress=false",
      "train.tensorboard=false", "train.warmup=1", "train.threads=1", "train.precision=fp32", "--steps", "1"]

ROWS = [
    # -- eval --data --------------------------------------------------------------------------
    R("eval {d}/converted", ["{d}/converted", "was converted from", "carries no training corpus",
                             "--data CORPUS|FILE|DIR", "tinyshakespeare"]),
    R("eval {d}/converted --data {d}/play.txt", ["--data {d}/play.txt", "no tokenizer.json",
                                                 "copy the model's tokenizer.json", "tfamily convert"]),
    R("eval {d}/lm --data {d}/prepared", ["--data {d}/prepared", "prepared with the vocabulary byte (256 values)",
                                          "reads char (65 characters)", "--data FILE"]),
    R("eval {d}/lm --data {d}/euro.txt", ["--data {d}/euro.txt", "holds 3 characters outside",
                                          "char (65 characters)", "the first 'é' (U+00E9) at character 3",
                                          "data.vocab=byte"]),
    R("eval {d}/lm --data {d}/reviews.csv", ["--data {d}/reviews.csv", "labelled file", "decoder language model",
                                             "a text file"]),
    R("eval {d}/lm --data {d}/nothing.txt", ["--data {d}/nothing.txt", "no such file", "tinyshakespeare",
                                             "tfamily data prepare"]),
    R("eval {d}/lm --data nosuchcorpus", ["--data nosuchcorpus", "not a corpus name", "kjv"]),
    R("eval {d}/cls --data tinyshakespeare", ["--data tinyshakespeare", "not a labelled file",
                                              "a classifier (labels: neg, pos)", "CSV or JSONL"]),
    R("eval {d}/cls --data {d}/meh.csv", ["meh.csv row 4", "label 'meh'", "not trained on", "neg, pos"]),
    R("eval {d}/cls --data {d}/few.csv --split test", ["few.csv has 12 rows", "too few for a test split",
                                                       "split=test", "--split val"]),
    R("eval {d}/charcls --data {d}/euro.csv", ["euro.csv holds 2 characters outside", "the first '€' (U+20AC)",
                                               "data.vocab=byte"]),
    R("eval {d}/copy --data {d}/play.txt", ["--data {d}/play.txt", "data.task=copy", "drop --data"]),
    # -- predict ------------------------------------------------------------------------------
    R("predict {d}/cls", ["--text T...", "--file F", "one of them"]),
    R("predict {d}/cls --text a --file {d}/play.txt", ["--text T...", "--file F", "one of them"]),
    R("predict {d}/cls --file {d}/nothing.txt", ["--file {d}/nothing.txt", "does not exist", "one text per line"]),
    R("predict {d}/cls --file {d}/blank.txt", ["--file {d}/blank.txt", "holds no texts", "one text per line"]),
    R("predict {d}/cls --file {d}/notext.csv", ["notext.csv row 2", "has no text", "'text'"]),
    R("predict {d}/cls --text a --batch-size 0", ["--batch-size", ">= 1", "got 0"]),
    R("predict {d}/charcls --text good good€ €", ["2 characters outside", "char (",
                                                 "the first '€' (U+20AC) in text 2", "data.vocab=byte"]),
    R("predict {d}/lm --text hi", ["{d}/lm", "decoder language model, not a classifier", "tfamily generate"]),
    R("predict {d}/nothing --text hi", ["{d}/nothing", "does not exist"]),
]


def _csv(path, rows: list[str]):
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("catalogue-eval-predict")
    (d / "play.txt").write_text("To be, or not to be, that is the question.\n" * 40)
    (d / "euro.txt").write_text("caf\u00e9 \u00e9\u00e9 " + "To be, or not to be.\n" * 40)
    (d / "blank.txt").write_text("\n  \n")
    _csv(d / "reviews.csv", ["text,label"] + [f"{'good fine' if i % 2 else 'bad dull'},{'pos' if i % 2 else 'neg'}"
                                              for i in range(24)])
    _csv(d / "meh.csv", ["text,label", "good,pos", "bad,neg", "so so,meh"])
    _csv(d / "few.csv", ["text,label"] + [f"row {i},{'pos' if i % 2 else 'neg'}" for i in range(12)])
    _csv(d / "euro.csv", ["text,label,split", "good,pos,val", "bad \u20ac\u20ac,neg,val"])
    _csv(d / "notext.csv", ["body,label", "good,pos"])
    for name, argv in {"lm": ["member=gpt"], "cls": ["member=gpt", f"data.corpus={d / 'reviews.csv'}"],
                       "charcls": ["member=gpt", f"data.corpus={d / 'reviews.csv'}", "data.vocab=char"],
                       "copy": ["member=gpt", "data.corpus=null", "data.task=copy"]}.items():
        assert cli.main(["train", *argv, *LM, "--out", str(d / name)]) == 0
    assert cli.main(["data", "prepare", str(d / "play.txt"), "--vocab", "byte", "--out", str(d / "prepared"),
                     "--no-progress"]) == 0
    from tfamily import members
    from tfamily.build import build
    from tfamily.export.hf import export_hf
    torch.manual_seed(0)
    spec = members.get("gpt")().override({"d_model": 16, "heads.n_heads": 2, "depth.n_layers": 1, "vocab_size": 40,
                                          "position.max_len": 32})
    export_hf(build(spec), d / "hf")
    assert cli.main(["convert", str(d / "hf"), "--out", str(d / "converted")]) == 0
    return str(d)


def _listing(root: str) -> list[tuple[str, float]]:
    return sorted((os.path.join(p, f), os.path.getmtime(os.path.join(p, f))) for p, _, fs in os.walk(root)
                  for f in fs)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_eval_data_and_predict_refuse_bad_input_in_one_line(row, d, capsys):
    before = _listing(d)
    last = run_row(row, [a.replace("{d}", d) for a in row.argv], capsys)
    for w in row.words:
        w = w.replace("{d}", d)
        assert w in last, (w, last)
    assert _listing(d) == before  # nothing written, nothing touched
