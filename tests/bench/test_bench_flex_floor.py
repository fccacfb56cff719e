"""`tfamily bench flex-floor` on CPU (tiny sizes; the GPU command is in
experiments/gpu_attention/): its floor BlockMask is the pattern's mask reduced to tiles, the rows
carry the three kernels and their ratios, a failing kernel or an exhausted budget is recorded
per row, and the files are written."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily.bench import flex_floor
from tfamily.bench.attention import visited_tiles
from tfamily.bench.flex_floor import block_mask_tiles, floor_block_mask
from tfamily.nn.kernels import FlexKernel
from tfamily.nn.patterns import dense_mask, is_per_head
from tfamily.nn.patterns.examples import examples

L, BLOCK, HEADS = 128, 32, 4


def _tiles(mask: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    H, n, m = mask.shape
    t = mask.view(H, n // block, block, m // block, block)
    return t.any(4).any(2), t.all(4).all(2)


def _listed(num: torch.Tensor, idx: torch.Tensor, n_k: int) -> torch.Tensor:
    """(H, nq, nk) bool: the key tiles a BlockMask table lists per query tile."""
    H, nq = num.shape[1:3]
    out = torch.zeros(H, nq, n_k, dtype=torch.bool)
    for hh in range(H):
        for r in range(nq):
            out[hh, r, idx[0, hh, r, :num[0, hh, r]].long()] = True
    return out


@pytest.mark.parametrize("name", [n for n in examples(L) if n != "causal"])
def test_floor_block_mask_is_the_patterns_mask_by_tile(name, monkeypatch):
    monkeypatch.setattr(flex_floor, "_CHUNK", HEADS * L * BLOCK)  # several chunks: their seams are tested
    pattern = examples(L)[name]
    mask = floor_block_mask(pattern, L, HEADS, BLOCK, "cpu")
    H = HEADS if is_per_head(pattern) else 1
    some, every = _tiles(dense_mask(pattern, L, L, n_heads=H), BLOCK)
    nt = L // BLOCK
    assert torch.equal(_listed(mask.full_kv_num_blocks, mask.full_kv_indices, nt), every)
    assert torch.equal(_listed(mask.kv_num_blocks, mask.kv_indices, nt), some & ~every)
    assert block_mask_tiles(mask, HEADS) == int(some.sum()) * (HEADS // H)


@pytest.mark.parametrize("name", ["sliding_window", "longformer", "bigbird", "local_1d"])
def test_tfamily_plans_visit_the_floor_masks_tiles_in_natural_order(name):
    pattern = examples(L)[name]
    mask = floor_block_mask(pattern, L, HEADS, BLOCK, "cpu")
    assert visited_tiles(pattern, L, HEADS, BLOCK, torch.device("cpu")) == block_mask_tiles(mask, HEADS)


def _argv(tmp_path, *extra):
    return ["bench", "flex-floor", "--device", "cpu", "--dtype", "float32", "--seq-lens", str(L), "--heads", "2",
            "--d-head", "16", "--block-size", str(BLOCK), "--patterns", "sliding_window", "--warmup", "1",
            "--threads", "1", "--reps", "2", "--profile-len", str(L), "--out", str(tmp_path), *extra]


def test_bench_flex_floor_rows_files_and_profile(tmp_path, json_rows):
    rows, _ = json_rows(_argv(tmp_path))
    (row,) = rows
    assert row["status"] == "ok" and row["max_abs_diff"] < 1e-4
    assert row["a_fwd_ms"] > 0 and row["b_fwd_ms"] > 0 and row["dense_fwd_bwd_ms"] > 0
    assert row.get("a_fwd_bwd_ms") is None and row.get("b_fwd_bwd_ms") is None  # CPU flex is forward-only
    assert row["tiles_a"] == row["tiles_b"] < row["tiles_dense"] == 2 * 4 * 5 // 2
    assert row["a_vs_b_fwd"] == round(row["a_fwd_ms"] / row["b_fwd_ms"], 3)
    for name in ("flex_floor.csv", "flex_floor.png", "flex_floor_meta.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "flex_floor.json").read_text()) == rows
    profile = (tmp_path / "flex_floor_profile.txt").read_text()
    assert "(a) tfamily flex kernel" in profile and "(b) plain flex_attention" in profile


def test_compare_reads_outputs_absolutely_and_gradients_relative_to_the_largest():
    out, grads = torch.zeros(2, 3), [torch.full((2, 3), 100.0)] * 3
    got = flex_floor.compare((out + 0.01, *grads), (out, grads[0], grads[1] + 1.0, grads[2]))
    assert got["max_abs_diff"] == pytest.approx(0.01) and got["grad_rel_diff"] == pytest.approx(1 / 101)
    assert "grad_rel_diff" not in flex_floor.compare((out,), (out,))  # CPU: forward only


def test_bench_flex_floor_records_a_failing_kernel_and_skips_past_the_budget(tmp_path, json_rows, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("triton: out of resources\nsecond line")
    monkeypatch.setattr(FlexKernel, "__call__", broken)
    rows, _ = json_rows(_argv(tmp_path, "--profile", "none"))
    (row,) = rows
    assert row["status"] == "partial" and row["a_error"] == "RuntimeError: triton: out of resources"
    assert row["b_fwd_ms"] > 0 and row.get("a_fwd_ms") is None
    monkeypatch.undo()

    def no_memory(*args, **kwargs):
        raise MemoryError("floor mask")
    monkeypatch.setattr(flex_floor, "floor_block_mask", no_memory)
    (row,), _ = json_rows(_argv(tmp_path, "--profile", "none"))
    assert row["status"] == "partial" and row["b_error"] == "MemoryError: floor mask" and row["a_fwd_ms"] > 0
    rows, _ = json_rows(_argv(tmp_path, "--time", "0", "--seq-lens", "256", str(L)))
    assert [(r["seq_len"], r["status"]) for r in rows] == [(256, "skipped"), (L, "skipped")]


def test_bench_flex_floor_refuses_lengths_off_the_block(tmp_path, capsys):
    from tfamily.cli import main
    assert main(_argv(tmp_path, "--seq-lens", "100")) == 2
    assert "--seq-lens [100] must be multiples of --block-size 32" in capsys.readouterr().err
