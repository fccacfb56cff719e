"""Images as autoregressive pixel sequences (``data/pixels.py``), a task for pixel decoders.

Batch t holds the images ``randint(len(train), (rows * world_size,))`` under generator
(seed, t), rank r taking its slice, as ``{"x", "y"}`` next-pixel pairs; throughput is
counted in pixels. Evaluation scores the first ``max_units`` pixels' worth of held-out
images in order, and reports bits per dimension (nats per pixel / ln 2; Parmar et al.
2018 report results on this scale).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from ..task import step_position
from .synthetic import generator


class PixelTask:
    kind, unit, vocab, carries_state = "pixels", "pixels", None, False

    def __init__(self, name: str, train, test, batch_size: int, *, seed: int = 0, rank: int = 0,
                 world_size: int = 1):
        """``train``, ``test``: ``data.pixels.PixelSequences`` in the model's pixel order."""
        if train.seq_len != test.seq_len or train.levels != test.levels:
            raise ValueError(f"train and test images differ: {train.seq_len} vs {test.seq_len} pixels, "
                             f"{train.levels} vs {test.levels} levels; quantise and order both alike")
        self.name, self.train, self.test = name, train, test
        self.vocab_size, self.seq_len = train.vocab_size, train.seq_len
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.step = 0

    def next(self) -> dict:
        index = torch.randint(len(self.train), (self.batch_size * self.world_size,),
                              generator=generator(self.seed, self.step))
        self.step += 1
        return self.train.batch(index[self.rank * self.batch_size:(self.rank + 1) * self.batch_size])

    def size(self, batch: dict) -> int:
        return batch["y"].numel()

    def carry(self, state) -> None:
        """Images are independent: nothing is carried."""

    def state_dict(self) -> dict:
        return step_position("pixels", self)

    def load_state_dict(self, state: dict) -> None:
        step_position("pixels", self, state)

    def images(self, max_units: int | None) -> int:
        n = len(self.test)
        return n if max_units is None else max(1, min(n, math.ceil(max_units / self.seq_len)))

    def eval_size(self, max_units: int | None) -> int:
        return self.images(max_units) * self.seq_len

    def eval_metrics(self, loss: float) -> dict:
        return {"bpd": loss / math.log(2)}

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """The first images in order; ranks take every world_size-th batch."""
        for i, b in enumerate(self.test.eval_batches(batch_size, self.images(max_units))):
            if i % self.world_size == self.rank:
                yield b
