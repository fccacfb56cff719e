"""The Reformer benchmarks run end to end at toy sizes and write what they promise
(JSON/CSV/PNG); the L^2 extrapolation of dense time is what it says. The duplication
reproduction's tests are in tests/repro/test_reformer_duplication.py."""
from __future__ import annotations

import argparse
import json
import sys

import pytest

from tfamily.bench import lsh as bench_lsh
from tfamily.bench import procmem
from tfamily.bench import reversible as bench_rev
from tfamily.bench.cli import BENCHES
from tfamily.repro import REPROS


def _args(module, argv):
    p = argparse.ArgumentParser()
    module.add_args(p)
    return p.parse_args(argv)


def test_registered_in_the_cli_tables():
    assert BENCHES["lsh"] == "tfamily.bench.lsh" and BENCHES["reversible"] == "tfamily.bench.reversible"
    assert REPROS["reformer-duplication"] == "tfamily.repro.reformer_duplication"


def test_peak_memory_sees_torch_cpu_allocations():
    import torch

    _, mb, _ = procmem.peak_mb(lambda: torch.ones(64, 2 ** 20).sum())  # 256 MiB, freed after
    assert 200 < mb < 400


def test_dense_time_beyond_the_measured_range_follows_l_squared():
    args = _args(bench_lsh, ["--lengths", "1024", "2048", "8192", "--max-dense-len", "2048"])
    rows = [{"kind": "dense_sdpa", "seq_len": 1024, "fwd_bwd_ms": 10.0, "threads": 2},
            {"kind": "dense_sdpa", "seq_len": 2048, "fwd_bwd_ms": 48.0, "threads": 2},
            {"kind": "lsh", "seq_len": 8192, "n_hashes": 1, "fwd_bwd_ms": 100.0}]
    bench_lsh._add_dense_extrapolation(rows, args)
    extra = [r for r in rows if r.get("extrapolated")]
    a = (10.0 * 1024 ** 2 + 48.0 * 2048 ** 2) / (1024 ** 4 + 2048 ** 4)  # least squares for t = a L^2
    assert len(extra) == 1 and extra[0]["seq_len"] == 8192 and extra[0]["peak_mb"] is None
    assert extra[0]["fwd_bwd_ms"] == pytest.approx(a * 8192 ** 2, rel=1e-3)
    assert rows[2]["speedup"] == pytest.approx(extra[0]["fwd_bwd_ms"] / 100.0, rel=1e-2)


def test_bench_lsh_end_to_end(tmp_path, capsys):
    args = _args(bench_lsh, ["--lengths", "256", "--rounds", "1", "2", "--heads", "2", "--d-head", "16",
                             "--bucket-size", "32", "--repeats", "0", "--threads", "1", "--peer", "none",
                             "--out", str(tmp_path), "--json"])
    assert bench_lsh.run(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["n_hashes"]) for r in rows] == [("dense_sdpa", None), ("lsh", 1), ("lsh", 2)]
    assert all(r["fwd_bwd_ms"] > 0 and r["peak_mb"] >= 0 for r in rows)
    assert all(r["speedup"] > 0 for r in rows if r["kind"] == "lsh")
    for name in ("lsh.json", "lsh.csv", "lsh.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_bench_lsh_skips_the_peer_rows_with_a_note_without_transformers(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    args = _args(bench_lsh, ["--lengths", "64", "--rounds", "1", "--heads", "1", "--d-head", "8",
                             "--bucket-size", "16", "--repeats", "0", "--threads", "1", "--max-dense-len", "0",
                             "--out", str(tmp_path), "--json"])
    assert bench_lsh.run(args) == 0
    out = capsys.readouterr()
    assert [r["kind"] for r in json.loads(out.out)] == ["lsh"]
    assert "peer rows skipped: transformers is not installed" in out.err


def test_bench_reversible_end_to_end(tmp_path, capsys):
    args = _args(bench_rev, ["--depths", "1", "--kinds", "reversible", "standard", "--seq-len", "32",
                             "--batch", "2", "--d-model", "32", "--heads", "2", "--threads", "1",
                             "--out", str(tmp_path), "--json"])
    assert bench_rev.run(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in rows] == ["reversible", "standard"]
    assert all(r["activation_mb"] >= 0 and r["peak_train_mb"] >= r["activation_mb"] for r in rows)
    assert rows[0]["param_mb"] == rows[1]["param_mb"]  # same layers, only the depth axis differs
    for name in ("reversible.json", "reversible.csv", "reversible.png"):
        assert (tmp_path / name).stat().st_size > 0
