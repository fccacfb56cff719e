"""What every synthetic task returns, and the checks they share.

A task is a small class with `name`, `kind` ("lm" or "classification"),
`vocab_size`, `seq_len` (the input length of every batch) and
`sample(batch_size, generator) -> Batch`. Samples are a pure function of the
generator's state: the same seed gives the same batch.

For kind "lm" the batch is already shifted: `target[:, t]` is the token that
follows `input[:, t]`, and the loss is `cross_entropy(logits, target)` over
the positions where `loss_mask` is True (only the part the task asks the
model to produce). For kind "classification" `target` is (b,) class ids
in 0..n_classes-1 and `loss_mask` is (b,) all True.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ...base import numbers

__all__ = ["Batch", "as_generator", "check_int"]


@dataclass(frozen=True, eq=False)
class Batch:
    """One batch of a synthetic task.

    input:     (b, n) long token ids.
    target:    (b, n) long for "lm" (next tokens), (b,) long for "classification".
    loss_mask: bool, shaped like target: True where the loss counts.
    valid:     (b, n) bool, True on real input tokens, False on padding.
    """

    input: torch.Tensor
    target: torch.Tensor
    loss_mask: torch.Tensor
    valid: torch.Tensor

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(t.to(device) for t in (self.input, self.target, self.loss_mask, self.valid)))


def check_int(task: str, name: str, value, minimum: int, maximum: int | None = None) -> int:
    """Validate an integer parameter, naming the task and the parameter."""
    return numbers.check_int(f"{task}: {name}", value, minimum, maximum)


def check_bounds(task: str, lo_name: str, lo: int, hi_name: str, hi: int) -> None:
    if lo > hi:
        raise ValueError(f"{task}: {lo_name}={lo} is larger than {hi_name}={hi}; make {lo_name} <= {hi_name}")


def check_lengths(task: str, min_len, max_len) -> tuple[int, int]:
    """``(min_len, max_len)``, each an integer of at least 1, with min_len <= max_len."""
    lo, hi = check_int(task, "min_len", min_len, 1), check_int(task, "max_len", max_len, 1)
    check_bounds(task, "min_len", lo, "max_len", hi)
    return lo, hi


def as_generator(generator: torch.Generator | int) -> torch.Generator:
    """A torch.Generator, or an int seed turned into one."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return torch.Generator().manual_seed(int(generator))
    raise TypeError(f"generator must be a torch.Generator or an int seed, got {type(generator).__name__}")


def check_batch_size(task: str, batch_size) -> int:
    return check_int(task, "batch_size", batch_size, 1)


def lm_pair(seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Full sequences (b, n + 1) -> (input, target) = (seq[:, :-1], seq[:, 1:])."""
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
