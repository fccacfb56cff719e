"""The arena's byte-level language-modelling task (``lm``): held-out splits, causal decoders, bits per
byte on the leaderboard (lower is better), end to end at a tiny length."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from tfamily import cli
from tfamily.arena import grid, table, tasks
from tfamily.data.corpora import load_corpus


def test_windows_come_from_the_corpus_splits_the_task_names():
    task = tasks.make("lm", 32, batch_size=2, seed=0, eval_examples=3)
    corpus = load_corpus("gcide", vocab="byte")
    first = next(task.val.batches(8))
    assert first["x"].shape == (3, 32) and torch.equal(first["x"][0], corpus.val[:32].long())
    assert torch.equal(next(task.test.batches(8))["x"][0], corpus.test[:32].long())  # the reported split
    assert torch.equal(task.peek()["x"], task.next()["x"])  # peek is the first batch, and does not move
    assert task.eval_metrics(math.log(2)) == {"bpc": 1.0}
    assert tasks.metric("lm") == "bpc" and tasks.metric("listops") == "acc"


def test_every_member_is_its_causal_decoder_for_language_modelling():
    from tfamily.build import pattern
    from tfamily.train.resolve import make_spec
    s = grid.Settings(steps=2, lengths={"lm": 64}, d_model=16, n_layers=2, n_heads=2)
    for label in ("gpt", "longformer", "bigbird"):
        spec, _ = make_spec(grid.config(grid.Cell("lm", label, 0), s, Path("."), None), 256, 64)
        assert all(pattern(spec, i).causal for i in range(2)), label


def test_a_sweep_keeps_the_rate_with_the_lowest_validation_bpc():
    def cell(lr, val, test):
        return {"task": "lm", "member": "m", "seed": 0, "lr": lr, "length": 8, "params": 10, "d_ff": 4, "steps": 2,
                "metric": "bpc", "test_acc": None, "val_acc": None, "test_bpc": test, "val_bpc": val,
                "train_s": 1.0, "tokens_per_s": 5.0, "peak_mb": 1.0}
    rows = table.summarize([cell(1e-3, 3.0, 2.9), cell(3e-3, 2.5, 2.6), cell(1e-2, 4.0, 1.0)])
    page = table.markdown(rows)
    assert rows[0]["lr"] == 3e-3 and rows[0]["test_bpc"] == 2.6 and "| m | 2.600 | 2.500 |" in page and "±" not in page


def test_lm_task_end_to_end_beside_a_classification_task(tmp_path):
    out = tmp_path / "lm"
    argv = ["arena", "--members", "gpt", "longformer", "--tasks", "lm", "listops", "--length", "lm=32",
            "listops=16", "--steps", "3", "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "2",
            "--eval-examples", "4", "--speed-rounds", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    board = json.loads((out / "leaderboard.json").read_text())
    lm = [r for r in board if r["task"] == "lm"]
    assert sorted((r["member"], r["metric"], r["test_acc"]) for r in lm) == [("gpt", "bpc", None),
                                                                               ("longformer", "bpc", None)]
    assert [r["test_bpc"] for r in lm] == sorted(r["test_bpc"] for r in lm)  # lower is better: best first
    assert all(0 < r["test_bpc"] < 9 and 0 < r["val_bpc"] < 9 for r in lm)  # bytes: 8 bits at uniform
    assert all(r["speed_from"] == "alternating" for r in board)  # the grid's last step timed every member
    assert "test bits per byte, lower is better" in (out / "leaderboard.md").read_text()
    assert cli.main(["arena", "report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.count("<th>test bits per byte</th>") == 1 and "timed alternating" in page  # lm's table
    assert page.count("<th>test_bpc</th>") == 1 and page.count("<th>test_acc</th>") == 1  # each task's cells
