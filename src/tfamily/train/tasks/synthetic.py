"""The synthetic tasks (``tfamily.data.TASKS``) for decoders and classifiers.

Batch t of the run is ``task.sample`` under generator (seed, t); rank r takes rows
r*b .. (r+1)*b-1 of the global batch. LM tasks give ``{"x": input, "y": target,
"loss_mask"}``; classification tasks add ``"key_padding"`` (True on real tokens),
since their models pool over the input.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from ...data import make_task
from ...settings.run import DataConfig
from ..task import step_position


def generator(seed: int, index: int) -> torch.Generator:
    # torch's CPU generator (mt19937) keeps only the low 32 bits of its seed, so packing the pair
    # as (seed << 32) ^ index gave every run seed the same batches; SeedSequence hashes the pair.
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, index]).generate_state(1)[0]))


EVAL_INDEX = 1 << 31  # held-out batches use generators disjoint from training's


class SyntheticTask:
    unit, vocab, carries_state = "tokens", None, False

    def __init__(self, cfg: DataConfig, batch_size: int, *, seed: int = 0, rank: int = 0, world_size: int = 1):
        self.task = make_task(cfg.task, **cfg.task_params)
        self.name, self.kind = self.task.name, self.task.kind
        self.vocab_size, self.seq_len = self.task.vocab_size, self.task.seq_len
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.step = 0

    def _sample(self, index: int, rows: int):
        b = self.task.sample(rows * self.world_size, generator(self.seed, index))
        sl = slice(self.rank * rows, (self.rank + 1) * rows)
        return b, sl

    def _batch(self, index: int, rows: int) -> dict:
        b, sl = self._sample(index, rows)
        out = {"x": b.input[sl], "y": b.target[sl], "loss_mask": b.loss_mask[sl]}
        if self.kind == "classification":
            out["key_padding"] = b.valid[sl]
        return out

    def next(self) -> dict:
        out = self._batch(self.step, self.batch_size)
        self.step += 1
        return out

    def size(self, batch: dict) -> int:
        return batch["x"].numel()

    def carry(self, state) -> None:
        """Batches are independent: nothing is carried."""

    def state_dict(self) -> dict:
        return step_position("task", self)

    def load_state_dict(self, state: dict) -> None:
        step_position("task", self, state)

    def eval_size(self, max_units: int | None) -> int:
        return max_units or 100_000

    def eval_metrics(self, loss: float) -> dict:
        return {}

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """A fixed held-out sample."""
        rows = max(1, batch_size // self.world_size)
        n = math.ceil((max_units or 100_000) / (rows * self.world_size * self.seq_len))
        for i in range(n):
            yield self._batch(EVAL_INDEX + i, rows)
