"""The bad-input catalogue of `tfamily data prepare|verify` and of a prepared folder as `data.corpus`:
empty or non-text sources, a missing column, mixed vocabularies, missing or truncated shards, a
manifest from a newer version. Each row: one line naming the value and the fix, exit status 2; a
refused prepare writes nothing (no output folder, no partial one)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tfamily import cli
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1", "--steps", "1"]
OUT = "--out {d}/new"

ROWS = [
    # -- data prepare: sources -----------------------------------------------------------------
    R(f"data prepare {{d}}/empty.txt --vocab byte {OUT}", ["empty.txt", "are empty", "pass text"]),
    R(f"data prepare {{d}}/image.bin --vocab byte {OUT}", ["image.bin", "not UTF-8 text", "NUL byte",
                                                         "'DIR/**/*.txt'"]),
    R(f"data prepare {{d}}/latin1.txt --vocab char {OUT}", ["latin1.txt", "not UTF-8 text", "byte 3"]),
    R(f"data prepare {{d}}/rows.jsonl --column body --vocab byte {OUT}", ["rows.jsonl", "no column 'body'",
                                                                        "text", "--column"]),
    R(f"data prepare {{d}}/rows.csv --column body --vocab byte {OUT}", ["rows.csv", "no column 'body'",
                                                                      "--column"]),
    R(f"data prepare {{d}}/numbers.jsonl --vocab byte {OUT}", ["numbers.jsonl", "holds 7, not text", "--column"]),
    R(f"data prepare {{d}}/nothing/*.txt --vocab byte {OUT}", ["nothing/*.txt", "matches no file", "quote"]),
    R(f"data prepare {{d}}/nothing.txt --vocab byte {OUT}", ["nothing.txt", "does not exist"]),
    R(f"data prepare {{d}}/emptydir --vocab byte {OUT}", ["emptydir", "holds no files"]),
    R(f"data prepare {{d}}/one.jsonl --vocab byte {OUT}", ["validation split has 0 tokens", "raise --val"]),
    # -- data prepare: settings ----------------------------------------------------------------
    R(f"data prepare {{d}}/play.txt {OUT}", ["--vocab is required", "--vocab bpe:4096"]),
    R(f"data prepare {{d}}/play.txt --vocab bpe:10 {OUT}", ["bpe:10", "[257, 1048576]", "bpe:1024"]),
    R(f"data prepare {{d}}/play.txt --vocab words {OUT}", ["'words'", "byte, char, bpe:N"]),
    R(f"data prepare {{d}}/play.txt --vocab {{d}}/emptydir {OUT}", ["emptydir", "no tokenizer.json"]),
    R(f"data prepare {{d}}/play.txt --vocab byte --val 0.6 --test 0.5 {OUT}", ["--val 0.6", "--test 0.5",
                                                                              "sum below 1"]),
    R(f"data prepare {{d}}/play.txt --vocab byte --val 0 {OUT}", ["--val", "got 0"]),
    R(f"data prepare {{d}}/play.txt --vocab byte --out {{d}}/play.txt", ["play.txt is a file", "folder"]),
    R("data prepare {d}/play.txt --vocab char --out {d}/prepared", ["{d}/prepared", "other settings", "--force"]),
    R("data prepare {d}/play.txt --vocab byte --out {d}/emptydir/../texts", ["not empty", "no prepared corpus",
                                                                             "another --out"]),
    # -- a prepared folder: data verify and data.corpus ----------------------------------------------
    R("data verify {d}/changed", ["val.bin has SHA-256", "changed after it was prepared", "--force"]),
    R("data verify {d}/truncated", ["train.bin", "truncated", "prepare it again"]),
    R("data verify {d}/texts", ["{d}/texts", "without a manifest.json", "tfamily data prepare"]),
    R("train data.corpus={d}/truncated", ["train.bin", "but its manifest says", "truncated", "prepare it again"]),
    R("train data.corpus={d}/missing", ["val.bin is missing", "incomplete", "prepare it again"]),
    R("train data.corpus={d}/newer", ["format_version 99", "newer than this tfamily reads", "upgrade tfamily"]),
    R("train data.corpus={d}/prepared data.vocab=char", ["data.vocab=char does not match", "prepared with byte",
                                                         "drop data.vocab"]),
    R("train data.corpus={d}/texts", ["{d}/texts", "without a manifest.json", "tfamily data prepare"]),
]


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("catalogue-data")
    (d / "empty.txt").write_text("")
    (d / "image.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    (d / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
    (d / "rows.jsonl").write_text('{"text": "a row"}\n')
    (d / "rows.csv").write_text("id,text\n1,a row\n")
    (d / "numbers.jsonl").write_text('{"text": 7}\n')
    (d / "one.jsonl").write_text('{"text": "only one document here"}\n')
    (d / "emptydir").mkdir()
    (d / "texts").mkdir()
    (d / "texts" / "a.txt").write_text("some words\n" * 50)
    (d / "play.txt").write_text("".join(f"line {i} of the play, with some words in it\n" for i in range(400)))
    assert cli.main(["data", "prepare", str(d / "play.txt"), "--vocab", "byte", "--out", str(d / "prepared"),
                     "--no-progress"]) == 0
    for name in ("changed", "truncated", "missing", "newer"):
        shutil.copytree(d / "prepared", d / name)
    with open(d / "changed" / "val.bin", "r+b") as f:
        f.write(b"#")
    with open(d / "truncated" / "train.bin", "r+b") as f:
        f.truncate(10)
    (d / "missing" / "val.bin").unlink()
    m = json.loads((d / "newer" / "manifest.json").read_text())
    (d / "newer" / "manifest.json").write_text(json.dumps({**m, "format_version": 99}))
    return str(d)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_data_commands_refuse_bad_input_in_one_line_naming_the_value_and_the_fix(row, d, tmp_path, capsys):
    argv = [a.replace("{d}", d) for a in row.argv]
    if argv[0] == "train":
        argv = ["train", *LM, *argv[1:], "--out", str(tmp_path / "run")]
    elif argv[:2] == ["data", "prepare"]:
        argv.append("--no-progress")
    before = sorted(p.name for p in Path(d).iterdir())
    last = run_row(row, argv, capsys)
    for w in row.words:
        w = w.replace("{d}", d)
        assert w in last, (w, last)
    assert sorted(p.name for p in Path(d).iterdir()) == before  # nothing written, no partial folder left


def test_a_corpus_too_large_for_memory_points_at_prepare(d, tmp_path, capsys, monkeypatch):
    from tfamily.data import corpora
    monkeypatch.setattr(corpora, "RAW_TEXT_BYTES", 1000)
    row = R("train", ["play.txt", "too large to read into memory with vocab char", "tfamily data prepare",
                      "--vocab char", "data.corpus=DIR"])
    last = run_row(row, ["train", *LM, f"data.corpus={d}/play.txt", "data.vocab=char", "--out", str(tmp_path / "r")],
                   capsys)
    assert all(w in last for w in row.words), last
