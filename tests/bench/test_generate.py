"""`tfamily bench generate` at a tiny shape: rows, equality report, files, plot and the skip
note (no timing assertions)."""
from __future__ import annotations

import csv
import json
import sys

import pytest

from tfamily import cli

TINY = ["bench", "generate", "--d-model", "32", "--layers", "1", "--heads", "2", "--vocab", "20",
        "--prompt-len", "3", "--new-tokens", "9", "--batches", "1", "2", "--rounds", "2"]


def test_bench_generate_rows_ratios_equality_and_files(tmp_path, json_rows):
    pytest.importorskip("transformers")
    rows, _ = json_rows(TINY + ["--out", str(tmp_path)])
    assert sorted((r["model"], r["batch"]) for r in rows) == [
        ("hf-gpt2", 1), ("hf-gpt2", 2), ("tfamily-cache", 1), ("tfamily-cache", 2), ("tfamily-recompute", 1)]
    rate = {(r["model"], r["batch"]): r["tokens_per_s"] for r in rows}
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["new_tokens"] == 9 and r["rounds"] == 2
        assert r["ms_per_step"] == pytest.approx(1e3 * r["batch"] / r["tokens_per_s"])
    for b in (1, 2):
        cache = next(r for r in rows if r["model"] == "tfamily-cache" and r["batch"] == b)
        assert cache["vs_hf"] == pytest.approx(rate[("tfamily-cache", b)] / rate[("hf-gpt2", b)])
    cache1 = next(r for r in rows if r["model"] == "tfamily-cache" and r["batch"] == 1)
    assert cache1["vs_recompute"] == pytest.approx(rate[("tfamily-cache", 1)] / rate[("tfamily-recompute", 1)])
    rec = next(r for r in rows if r["model"] == "tfamily-recompute")
    assert rec["equal_to_cache"] is True and rec["first_difference"] is None  # cached decoding equals recomputation
    assert json.loads((tmp_path / "generate.json").read_text()) == rows
    with open(tmp_path / "generate.csv") as f:
        assert len(list(csv.DictReader(f))) == 5
    assert (tmp_path / "generate.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_generate_skips_hf_with_a_note(tmp_path, json_rows, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    rows, printed = json_rows(TINY + ["--no-recompute", "--out", str(tmp_path)])
    assert "transformers is not installed" in printed and printed.count("\n") == 1
    assert sorted((r["model"], r["batch"]) for r in rows) == [("tfamily-cache", 1), ("tfamily-cache", 2)]
    assert all(r["vs_hf"] is None for r in rows)
    saved = json.loads((tmp_path / "generate.json").read_text())
    assert [r["note"] for r in saved if r["model"] == "hf-gpt2"] == [printed.strip()]


def test_bench_generate_refuses_bad_batches(capsys):
    assert cli.main(TINY + ["--batches", "0"]) == 2
    assert "--batches must be integers >= 1" in capsys.readouterr().err
