"""`tfamily bench peers` at a tiny shape: rows, files, plot and the skip note (no timing assertions)."""
from __future__ import annotations

import csv
import json
import sys

import pytest
import torch

from tfamily import cli
from tfamily.bench import peers
from tfamily.bench.peers import parse_shape

TINY = ["bench", "peers", "--shapes", "32:1:2:16:2", "--rounds", "2", "--steps", "1", "--matmul-size", "64",
        "--vocab", "40"]


def test_bench_peers_writes_rows_files_and_plot(tmp_path, json_rows):
    pytest.importorskip("x_transformers")
    rows, _ = json_rows(TINY + ["--precisions", "fp32", "bf16", "--out", str(tmp_path)])
    assert [(r["model"], r["precision"]) for r in rows] == [
        (m, p) for m in ("tfamily", "x-transformers", "flat") for p in ("fp32", "bf16")]
    for prec in ("fp32", "bf16"):  # one peak per precision, timed in the rounds beside the models
        assert len({r["peak_gflops"] for r in rows if r["precision"] == prec}) == 1
    fpt = {r["flops_per_token"] for r in rows}
    assert len(fpt) == 1  # one FLOP count per shape, whatever the model
    for r in rows:
        assert r["steps"] == 2 and r["tokens_per_s"] > 0 and r["peak_gflops"] > 0
        assert r["step_ms"] == pytest.approx(2 * 16 / r["tokens_per_s"] * 1e3)
        assert r["fraction_of_peak"] == pytest.approx(r["model_gflops"] / r["peak_gflops"])
        assert (r["d_model"], r["n_layers"], r["n_heads"], r["seq_len"], r["batch"], r["vocab"]) == (32, 1, 2, 16, 2, 40)
        same_model = [q for q in rows if q["model"] == r["model"]]
        assert r["best"] == (r["tokens_per_s"] == max(q["tokens_per_s"] for q in same_model))
        ours = next(q for q in rows if q["model"] == "tfamily" and q["precision"] == r["precision"])
        assert r["vs_tfamily"] == pytest.approx(r["tokens_per_s"] / ours["tokens_per_s"])
    assert json.loads((tmp_path / "peers.json").read_text()) == rows
    with open(tmp_path / "peers.csv") as f:
        assert [r["model"] for r in csv.DictReader(f)] == [r["model"] for r in rows]
    assert (tmp_path / "peers.png").read_bytes()[:4] == b"\x89PNG"


def test_compiled_variant_compiles_the_same_model(tmp_path, json_rows):
    """`--models tfamily-compiled`: torch.compile of the same loss; its rows sit beside the eager ones,
    and its loss equals the eager model's on the same weights."""
    rows, _ = json_rows(TINY + ["--models", "tfamily", "tfamily-compiled", "--precisions", "fp32",
                                "--out", str(tmp_path)])
    assert [r["model"] for r in rows] == ["tfamily", "tfamily-compiled"]
    assert rows[1]["steps"] == 2 and rows[1]["vs_tfamily"] == pytest.approx(rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"])
    s = parse_shape("32:1:2:16:2", 40)
    torch.manual_seed(0)
    _, eager = peers.BUILDERS["tfamily"](s)
    torch.manual_seed(0)  # the same weights
    _, compiled = peers.BUILDERS["tfamily-compiled"](s)
    x = torch.randint(0, 40, (2, 16))
    batch = {"x": x, "y": x.roll(-1, dims=1)}
    torch.testing.assert_close(compiled(batch), eager(batch))


def test_bench_peers_skips_x_transformers_with_a_note(tmp_path, json_rows, monkeypatch):
    monkeypatch.setitem(sys.modules, "x_transformers", None)  # import fails as if not installed
    rows, printed = json_rows(TINY + ["--models", "tfamily", "x-transformers", "--precisions", "fp32",
                                          "--out", str(tmp_path)])
    assert "x-transformers is not installed" in printed and printed.count("\n") == 1
    skipped = [r for r in json.loads((tmp_path / "peers.json").read_text()) if r["model"] == "x-transformers"]
    assert len(skipped) == 1 and "not installed" in skipped[0]["note"] and "tokens_per_s" not in skipped[0]
    assert [r["model"] for r in rows] == ["tfamily"]


def test_default_precisions_leave_out_emulated_bf16(monkeypatch, capsys):
    from tfamily.train import device as dev
    monkeypatch.setattr(dev, "cpu_has_bf16", lambda: False)
    assert peers.default_precisions(torch.device("cpu")) == ["fp32"]
    assert "bf16 is emulated" in capsys.readouterr().out
    monkeypatch.setattr(dev, "cpu_has_bf16", lambda: True)
    assert peers.default_precisions(torch.device("cpu")) == ["fp32", "bf16"]


def test_shapes_presets_and_bad_values():
    assert (parse_shape("bench", 256).d_model, parse_shape("bench", 256).batch) == (256, 16)
    assert parse_shape("demo", 65).seq_len == 128
    with pytest.raises(ValueError, match="D:LAYERS:HEADS:SEQ:BATCH"):
        parse_shape("huge", 256)
    with pytest.raises(ValueError, match="divisible"):
        parse_shape("30:1:4:16:2", 256)


def test_bench_peers_refuses_zero_rounds(capsys):
    assert cli.main(TINY + ["--rounds", "0"]) == 2
    assert "--rounds must be >= 1" in capsys.readouterr().err
