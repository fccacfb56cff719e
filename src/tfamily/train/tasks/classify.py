"""Classification from held-out sets fixed in advance: one class per input, for ``Classifier`` models.

Training batch t is ``draw(batch_size, generator(seed, t))``: a pure function of (seed, t), so a
resumed run sees the batches it would have, and every model trained with one seed sees the same
data in the same order. The validation and test sets are tensors made once (``Examples``), the same
for every seed and model. Batches are ``{"x": (b, n), "y": (b,), "key_padding": (b, n)}`` with
``key_padding`` True on real tokens (inputs right-padded); a task of pairs (a dual encoder's) has
``x`` and ``key_padding`` of shape (b, 2, n).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..task import step_position


def generator(seed: int, index: int) -> torch.Generator:
    """The generator of batch ``index`` of run ``seed``. torch's CPU generator keeps only the low 32
    bits of its seed (``manual_seed(2**32)`` draws as ``manual_seed(0)``), so (seed, index) is hashed
    into 32 bits rather than packed side by side."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, index]).generate_state(1)[0]))


@dataclass(frozen=True, eq=False)
class Examples:
    """A fixed set: ``x`` (m, n) ids, ``y`` (m,) classes, ``key_padding`` (m, n) True on real tokens."""
    x: torch.Tensor
    y: torch.Tensor
    key_padding: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def batches(self, batch_size: int, limit: int | None = None) -> Iterator[dict]:
        """The first ``limit`` examples (all: None) in batches of ``batch_size``."""
        end = len(self) if limit is None else min(limit, len(self))
        for i in range(0, end, batch_size):
            j = min(end, i + batch_size)
            yield {"x": self.x[i:j], "y": self.y[i:j], "key_padding": self.key_padding[i:j]}


class ClassifyTask:
    kind, unit, vocab, carries_state = "classification", "tokens", None, False
    rank, world_size = 0, 1

    def __init__(self, name: str, draw: Callable[[int, torch.Generator], dict], val: Examples, test: Examples, *,
                 vocab_size: int, n_classes: int, batch_size: int, seed: int = 0, vocab=None, labels: tuple = ()):
        """``vocab``: the text vocabulary of a task read from text (saved with checkpoints); ``labels``:
        the class names by id, kept in the task's position so a resumed run checks they are the same."""
        self.name, self.draw, self.val, self.test = name, draw, val, test
        self.vocab, self.labels = vocab, tuple(labels)
        self.vocab_size, self.n_classes, self.seq_len = vocab_size, n_classes, val.x.shape[-1]
        self.units = val.x[0].numel()  # tokens per example: seq_len, or 2 seq_len for a pair
        self.batch_size, self.seed, self.step = batch_size, seed, 0

    def next(self) -> dict:
        out = self.draw(self.batch_size, generator(self.seed, self.step))
        self.step += 1
        return out

    def size(self, batch: dict) -> int:
        return batch["x"].numel()

    def carry(self, state) -> None:
        """Batches are independent: nothing is carried."""

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """The validation set, or its first ``max_units`` tokens' worth of examples."""
        yield from self.val.batches(batch_size, None if max_units is None else max(1, max_units // self.units))

    def eval_size(self, max_units: int | None) -> int:
        return min(max_units or len(self.val) * self.units, len(self.val) * self.units)

    def eval_metrics(self, loss: float) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {**step_position("classify", self), **({"labels": list(self.labels)} if self.labels else {})}

    def load_state_dict(self, state: dict) -> None:
        if list(self.labels) != list(state.get("labels", [])):
            raise ValueError(f"the run's labels were {state.get('labels', [])}, the data's are {list(self.labels)}; "
                             f"resume with the file the run trained on")
        step_position("classify", self, state)
