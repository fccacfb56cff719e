"""The arena's tasks: fixed held-out sets for every seed, batches a function of (seed, step)."""
from __future__ import annotations

import pytest
import torch

from tfamily.arena import tasks
from tfamily.train.tasks.classify import generator


def test_generator_depends_on_the_seed_beyond_32_bits():
    draws = {tuple(torch.randint(1000, (4,), generator=generator(s, 0)).tolist()) for s in (0, 1, 2**32)}
    assert len(draws) == 3


@pytest.mark.parametrize("name, length, n, classes", [("listops", 24, 24, 10), ("mnist", 7, 49, 10),
                                                      ("text", 32, 32, 3), ("pathfinder", 8, 64, 2)])
def test_task_batches_and_held_out_sets(name, length, n, classes):
    a = tasks.make(name, length, batch_size=4, seed=0, eval_examples=8)
    b = tasks.make(name, length, batch_size=4, seed=1, eval_examples=8)
    batch = a.next()
    assert batch["x"].shape == (4, n) and batch["y"].max() < classes == a.n_classes and a.seq_len == n
    assert torch.equal(a.val.x, b.val.x) and torch.equal(a.test.y, b.test.y)  # the same for every seed
    assert not torch.equal(a.val.x, a.test.x)
    position = a.state_dict()
    again = a.next()
    a.load_state_dict(position)
    assert torch.equal(a.next()["x"], again["x"])
    assert sum(len(e["y"]) for e in a.eval_batches(None, 3)) == 8


def test_match_rows_are_pairs_from_one_corpus():
    a = tasks.make("match", 32, batch_size=6, seed=0, eval_examples=8)
    batch = a.next()
    assert batch["x"].shape == (6, 2, 32) and batch["key_padding"].shape == (6, 2, 32)
    assert a.n_classes == 2 and a.seq_len == 32 and a.units == 64
    assert set(batch["y"].tolist()) <= {0, 1} and a.val.x.shape == (8, 2, 32)
    assert torch.equal(a.test.x, tasks.make("match", 32, batch_size=6, seed=1, eval_examples=8).test.x)
    with pytest.raises(ValueError, match="lower --length match"):
        tasks.make("match", 8192, batch_size=2, seed=0, eval_examples=2)
