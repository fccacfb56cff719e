"""The arena's language-modelling task (``lm``): bytes of the GCIDE dictionary at a long context.

Long Range Arena has no language-modelling task; the issue it answers does (byte-level modelling at
4K-16K context, the setting of the Sparse Transformer, Longformer and Reformer papers on enwik8).
enwik8 is not shipped; GCIDE is the shipped corpus of enwik8's size and kind (40 MB of marked-up
English reference text, read as bytes, vocabulary 256), split 90% / 5% / 5% in file order
(``data/corpora.py``): training windows of ``length`` bytes start anywhere in the first 90%, drawn
from (seed, step); the validation set (used to pick a learning rate) is the first
``--eval-examples`` non-overlapping windows of the next 5%, the test set (the reported number) the
first of the last 5%. The metric is bits per byte of the test windows (bpc; lower is better),
every byte of a window scored given the bytes before it in the window. Long-range: an entry's
headword, its senses and cross-references recur across hundreds to thousands of bytes, and the
markup's open tags are closed far away, so a longer context lowers the bpc only for a member that
reaches back.

Every member runs as its causal decoder here (the arena's rule for this task: a language model
predicts each byte from the ones before it, so the two-sided encoders of the classification tasks
do not apply), with its own pattern at the task's length (its context rule first).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from .base import Declared, register

CORPUS = "gcide"


class HeldOut:
    """The first ``windows`` non-overlapping windows of ``length`` bytes of one split, in order."""

    def __init__(self, data, length: int, windows: int, split: str):
        have = (len(data) - 1) // length
        if have < 1:
            raise ValueError(f"--length lm={length}: the {split} split of {CORPUS} has {len(data):,} bytes, fewer "
                             f"than one window of {length + 1}; lower --length lm")
        self.data, self.length, self.windows = data, length, min(windows, have)

    def __len__(self) -> int:
        return self.windows

    def batches(self, batch_size: int) -> Iterator[dict]:
        from ...data.batching import EvalBatches
        for x, y in EvalBatches(self.data, self.length, batch_size, max_tokens=self.windows * self.length):
            yield {"x": x, "y": y}


class ByteLMTask:
    """The ``Task`` of the loop (``train/task.py``) for ``lm``: random training windows, the
    validation windows for the loop's evaluation (bits per byte), ``test`` for the reported number."""

    kind, unit, carries_state, rank, world_size = "text", "tokens", False, 0, 1
    n_classes = None
    metric = "bpc"

    def __init__(self, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
        from ...data.batching import RandomWindows
        from ...data.corpora import load_corpus
        corpus = load_corpus(CORPUS, data_dir, vocab="byte")
        self.name, self.vocab, self.vocab_size, self.seq_len = "lm", corpus.vocab, corpus.vocab.size, length
        self.batch_size, self.seed = batch_size, seed
        self.train = RandomWindows(corpus.train, length, batch_size, seed=seed)
        self.val = HeldOut(corpus.val, length, eval_examples, "validation")
        self.test = HeldOut(corpus.test, length, eval_examples, "test")

    def next(self) -> dict:
        x, y = next(self.train)
        return {"x": x, "y": y}

    def peek(self) -> dict:
        """The first training batch, without moving the task's position."""
        x, y = self.train.sample(0)
        return {"x": x, "y": y}

    def size(self, batch: dict) -> int:
        return batch["x"].numel()

    def carry(self, state) -> None:
        """Windows are independent: nothing is carried."""

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        yield from self.val.batches(batch_size)

    def eval_size(self, max_units: int | None) -> int:
        return len(self.val) * self.seq_len

    def eval_metrics(self, loss: float) -> dict:
        return {"bpc": loss / math.log(2)}  # bytes are the characters: nats per byte / ln 2

    def state_dict(self) -> dict:
        return self.train.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.train.load_state_dict(state)


# Every member its own causal decoder (grid.config), scored in bits per byte of the test windows.
TASK = register(Declared("lm", 4096, ByteLMTask, metric="bpc"))
