"""The arena's FLOPs rule (``arena/flops.py``) against hand computations: pairs of a pattern, a whole
dense classifier, the same classifier under a sliding window, LSH's chunk pairs and hashing."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tfamily.arena import flops, grid
from tfamily.build import build
from tfamily.nn.kernels import LSHKernel
from tfamily.nn.patterns import Causal, Full, SlidingWindow
from tfamily.train.resolve import make_spec

D, LAYERS, HEADS, N, B, CLASSES, VOCAB = 16, 2, 2, 12, 3, 10, 20


def test_pairs_of_full_causal_and_a_window_are_counted_exactly():
    assert flops.pairs(Full(), N, n_heads=HEADS) == HEADS * N * N
    assert flops.pairs(Causal(), N) == N * (N + 1) // 2
    # Two-sided window 3: |i - j| < 3, so up to 5 keys; the first and last two rows lose 2, 1 keys at the edges.
    assert flops.pairs(SlidingWindow(window=3, causal=False), N, tile=5) == 5 * N - 2 * (2 + 1)
    assert flops.pairs(SlidingWindow(window=3), N) == 3 * N - (2 + 1)  # causal: itself and 2 before
    assert flops.pairs(Causal(), 4, 10, q_offset=6) == 7 + 8 + 9 + 10  # queries 6..9 against 10 keys


def _classifier(pattern: dict | None) -> torch.nn.Module:
    """The arena's gpt classifier at a tiny shape; ``pattern``: another pattern in its place."""
    from tfamily.train.config import from_dict
    s = grid.Settings(steps=1, lengths={"listops": N}, d_model=D, n_layers=LAYERS, n_heads=HEADS)
    cfg = grid.config(grid.Cell("listops", "gpt", 0), s, Path("."), CLASSES)
    if pattern is not None:
        d = cfg.to_dict()
        cfg = from_dict({**d, "model": {**d["model"], "pattern": pattern}})
    spec, _ = make_spec(cfg, VOCAB, N)
    return build(spec)


def _hand(pairs_per_head: int) -> int:
    """3 x forward: the blocks' matrices per token, the head per row, attention per pair."""
    per_token = 2 * (3 * D * D + D * D + 2 * D * 4 * D)          # q, k, v, out; feed-forward d -> 4d -> d
    head = 2 * D * CLASSES
    attend = HEADS * pairs_per_head * 2 * (2 * D // HEADS)       # scores and values, d_head each
    return 3 * (LAYERS * (B * N * per_token + B * attend) + B * head)


def _batch() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randint(VOCAB, (B, N), generator=g), "y": torch.randint(CLASSES, (B,), generator=g),
            "key_padding": torch.ones(B, N, dtype=torch.bool)}


@pytest.mark.parametrize("pattern, pairs", [(None, N * N), ({"name": "sliding_window", "params": {"window": 3,
                                                                                                   "causal": False}},
                                                             5 * N - 6)], ids=["dense", "sliding-window"])
def test_a_classifier_step_costs_what_the_hand_count_says(pattern, pairs):
    model = _classifier(pattern)
    assert flops.step_flops(model, _batch()) == _hand(pairs)


def test_lsh_pays_for_its_chunk_pairs_and_for_hashing():
    k = LSHKernel(n_hashes=2, bucket_size=4)        # chunks of 4: a query scores 8 slots per round
    n, h, e = 32, 2, 8                              # 32 / 4 = 8 buckets: a rotation of 4 columns
    want = h * (2 * n * 8 * 2 * (e + e) + 2 * n * 2 * e * 4 + 2 * n * math.ceil(math.log2(n)))
    assert flops.lsh_flops(k, n, n, h, e, e) == want
    # ... which at this length is far below dense attention's 2 * n * n pairs per head.
    assert flops.lsh_flops(k, 4096, 4096, h, e, e) < h * 4096 * 4096 * 2 * (e + e)


def test_a_flops_budget_stops_each_cell_when_spent(tmp_path):
    import json

    from tfamily import cli
    from tfamily.arena import tasks
    argv = ["arena", "--members", "gpt", "longformer", "--tasks", "listops", "--length", "listops=16", "--d-model", "16",
            "--layers", "1", "--heads", "2", "--batch-size", "4", "--eval-examples", "8", "--speed-rounds", "0"]
    s = grid.Settings(steps=None, lengths={"listops": 16}, d_model=16, n_layers=1, n_heads=2, batch_size=4)
    task = tasks.make("listops", 16, batch_size=4, seed=0, eval_examples=1)
    per_step = {m: grid.step_flops(grid.Cell("listops", m, 0), s, task, 64) for m in ("gpt", "longformer")}
    budget = 3.5 * per_step["gpt"]  # the windowed member visits fewer pairs, so the same budget buys it more steps
    assert cli.main([*argv, "--flops", str(budget), "--out", str(tmp_path / "a")]) == 0
    cells = {c["member"]: c for c in json.loads((tmp_path / "a" / "cells.json").read_text())}
    assert cells["gpt"]["steps"] == 3 and cells["gpt"]["train_flops"] == 3 * per_step["gpt"]
    assert per_step["longformer"] < per_step["gpt"]
    assert cells["longformer"]["steps"] == int(budget // per_step["longformer"]) >= 3
    assert all(c["train_flops"] <= budget for c in cells.values())
