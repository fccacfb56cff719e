"""Pixel images as a Task: batch t depends only on (seed, t), ranks split the global batch,
evaluation scores whole test images in order and reports bits per dimension."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.data.pixels import PixelOrder, PixelSequences
from tfamily.train.task import Task
from tfamily.train.tasks.pixels import PixelTask


def _sets(levels=4):
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 256, (20, 4, 4), generator=g, dtype=torch.uint8)
    test = torch.randint(0, 256, (6, 4, 4), generator=g, dtype=torch.uint8)
    order = PixelOrder(4, 4, (2, 2))
    return PixelSequences(train, levels, order), PixelSequences(test, levels, order)


def test_batches_are_a_function_of_seed_and_step_split_over_ranks():
    train, test = _sets()
    whole = PixelTask("p", train, test, 4, seed=1)
    assert isinstance(whole, Task) and whole.unit == "pixels" and whole.vocab_size == 4 and whole.seq_len == 16
    halves = [PixelTask("p", train, test, 2, seed=1, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(3):
        b = whole.next()
        parts = [h.next() for h in halves]
        assert torch.equal(b["y"], torch.cat([p["y"] for p in parts]))
        assert whole.size(b) == 4 * 16
    position = whole.state_dict()
    nxt = whole.next()
    again = PixelTask("p", train, test, 4, seed=99)
    again.load_state_dict(position)
    assert torch.equal(again.next()["x"], nxt["x"])
    with pytest.raises(ValueError, match="global_batch: saved 4, here 8"):
        PixelTask("p", train, test, 8).load_state_dict(position)


def test_evaluation_scores_whole_images_in_order():
    train, test = _sets()
    task = PixelTask("p", train, test, 4)
    assert task.eval_size(17) == 2 * 16 and task.eval_size(None) == 6 * 16
    ys = torch.cat([b["y"] for b in task.eval_batches(40, 2)])
    assert torch.equal(ys, test.tokens[:3])
    assert task.eval_metrics(math.log(2) * 1.5) == {"bpd": pytest.approx(1.5)}


def test_train_and_test_must_match():
    train, _ = _sets(levels=4)
    _, test = _sets(levels=8)
    with pytest.raises(ValueError, match="4 vs 8 levels"):
        PixelTask("p", train, test, 2)
