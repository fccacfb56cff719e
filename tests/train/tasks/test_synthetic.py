"""Synthetic tasks on the loop: batch t is the task's sample under generator (seed, t)."""
from __future__ import annotations

import torch

from tfamily.settings.run import DataConfig
from tfamily.train.tasks.synthetic import EVAL_INDEX, SyntheticTask, generator


def _first(seed: int, index: int = 0) -> torch.Tensor:
    return torch.rand(8, generator=generator(seed, index))


def test_every_run_seed_and_step_draws_its_own_batch():
    # torch's CPU generator reads 32 bits of its seed: seeds packed above bit 32 all collided
    draws = {(s, i): _first(s, i) for s in range(4) for i in (0, 1, EVAL_INDEX)}
    keys = list(draws)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert not torch.equal(draws[keys[a]], draws[keys[b]]), (keys[a], keys[b])
    assert torch.equal(_first(3, 7), _first(3, 7))


def test_two_seeds_of_a_task_train_on_different_batches():
    cfg = DataConfig(task="copy")
    a = SyntheticTask(cfg, 4, seed=0).next()
    b = SyntheticTask(cfg, 4, seed=1).next()
    assert not torch.equal(a["x"], b["x"])
