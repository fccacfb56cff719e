"""`tfamily bench xl-eval` and `tfamily plot spans`: rows, files, and that both
evaluations score the same tokens (no timing assertions)."""
from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from tfamily import cli, members
from tfamily.bench.spans import span_stats, summary
from tfamily.bench.xl_eval import eval_memory, eval_vanilla
from tfamily.build import build


def test_memory_and_vanilla_score_the_same_targets_identically_when_both_are_exact():
    # A causal window of w keys in each of 2 layers: with mem_len >= w - 1 the memory pass is
    # exact, and a vanilla window of A >= 2 (w - 1) + 1 tokens reproduces the full pass too.
    # PyTorch's init with scaled embeddings: at GPT-2's N(0, 0.02) an untrained model barely reads its
    # context, and the shorter window below would score within 1e-6 of the exact one.
    torch.manual_seed(0)
    model = build(members.transformer_xl(vocab_size=20, d_model=32, dropout=0.0, heads={"n_heads": 2},
                                         depth={"n_layers": 2}, ff={"d_ff": 64}, init={"name": "torch", "params": {}},
                                         scale_embeddings=True,
                                         pattern={"name": "sliding_window", "params": {"window": 4}})).eval()
    tokens = torch.randint(0, 20, (2 * 41,))
    nll_a, scored, made, _, positions = eval_memory(model, tokens, 8, 4, 2, skip=12)
    assert made == 2 * 40 and scored == 2 * 29
    assert positions.tolist() == list(range(12, 41)) + list(range(53, 82))
    nll_b, n_b, _ = eval_vanilla(model, tokens, positions, 12, 4)
    assert n_b == scored and math.isclose(nll_a, nll_b, rel_tol=1e-5)
    # A window shorter than the receptive field sees less: a different loss on the same targets.
    nll_c, _, _ = eval_vanilla(model, tokens, positions, 3, 4)
    assert math.isfinite(nll_c) and not math.isclose(nll_a, nll_c, rel_tol=1e-4)
    with pytest.raises(ValueError, match="positions >= 20"):
        eval_vanilla(model, tokens, positions, 20, 4)


def test_bench_xl_eval_writes_rows_files_and_plot(tmp_path, capsys):
    out = tmp_path / "xl"
    argv = ["bench", "xl-eval", "--steps", "2", "--d-model", "32", "--layers", "1", "--heads", "2",
            "--seg-len", "8", "--mem-len", "8", "--eval-mem-lens", "8", "16", "--tokens", "64", "--rows", "2",
            "--clamp-len", "12", "--out", str(out), "--json"]
    assert cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["mode"], r["attention_length"]) for r in rows] == [("memory", 16), ("vanilla", 16),
                                                                 ("memory", 24), ("vanilla", 24)]
    assert all("clamp_len 12" in r["model"] for r in rows)
    for a, b in zip(rows[::2], rows[1::2]):
        assert a["scored"] == b["scored"] == b["tokens"] > 0 and a["tokens"] > a["scored"]
        assert 0 < a["bpc"] < 10 and 0 < b["bpc"] < 10
        assert a["speedup"] == pytest.approx(a["tokens_per_s"] / b["tokens_per_s"])
    assert json.loads((out / "xl_eval.json").read_text()) == rows
    with open(out / "xl_eval.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (out / "xl_eval.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_spans_from_a_trained_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--member", "adaptive_span", "model.d_model=32", "model.depth.n_layers=2",
            "model.heads.n_heads=2", "model.pattern.params.max_span=16", "model.pattern.params.ramp=4",
            "model.pattern.params.init=0.5", "model.state.mem_len=16", "model.dropout=0.0",
            "data.seq_len=8", "data.stream=true", "train.batch_size=2", "train.max_steps=2",
            "train.eval_tokens=64", "train.progress=false", "train.tensorboard=false", "--out", str(run), "--json"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    png = tmp_path / "spans.png"
    assert cli.main(["plot", "spans", str(run), "--out", str(png), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(png.with_suffix(".json").read_text()) == result
    assert [r["layer"] for r in result["layers"]] == [0, 1]
    for r in result["layers"]:
        assert len(r["spans"]) == 2 and all(0 <= z <= 16 for z in r["spans"])
        assert 0 < r["flops_fraction_heads"] <= r["flops_fraction_executed"] <= 1


def test_span_stats_count_flops_against_the_full_span():
    model = build(members.adaptive_span(vocab_size=20, d_model=32, heads={"n_heads": 2}, depth={"n_layers": 1},
                                        pattern={"params": {"max_span": 100, "ramp": 10}}))
    span = model.stack.blocks[0].attn.pattern
    with torch.no_grad():
        span.span_frac.copy_(torch.tensor([0.1, 0.3]))
    (row,) = span_stats(model)
    assert row["spans"] == [10.0, 30.0] and row["reach"] == 40
    assert row["flops_fraction_heads"] == pytest.approx((20 + 40) / 2 / 100)
    assert row["flops_fraction_executed"] == pytest.approx(0.4)
    assert summary([row])["flops_saved_heads"] == pytest.approx(0.7)


def test_plot_spans_refuses_a_model_without_spans(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--member", "transformer_xl", "model.d_model=32", "model.depth.n_layers=1",
            "model.heads.n_heads=2", "model.state.mem_len=8", "data.seq_len=8", "data.stream=true",
            "train.batch_size=2", "train.max_steps=1", "train.eval_tokens=32", "train.progress=false",
            "train.tensorboard=false", "--out", str(run)]
    assert cli.main(argv) == 0
    assert cli.main(["plot", "spans", str(run), "--out", str(tmp_path / "s.png")]) == 2
    assert "no adaptive spans" in capsys.readouterr().err
