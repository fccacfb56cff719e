"""The state Protocol: what crosses step or segment boundaries, as the rest of the code sees it.

A model's whole state is a ``State``. The model asks it for ``offset`` (the absolute
position of the next token, for position encodings) and calls ``advance(n)`` once after
every call over ``n`` new tokens. Everyone else (the trainer, evaluation, beam search,
an RL rollout) uses only the rest of the protocol, never a state's fields:
``state_dict()`` / ``load_state_dict()`` (checkpointed and resumed bitwise),
``reorder(index)`` (keep batch rows ``index``: beam search) and ``reset(rows)``
(forget some batch rows: a document or an episode ended). ``carried`` says whether a
trainer keeps the state from one training batch to the next (XL memory: yes; a
decoding cache: no).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class State(Protocol):
    """What models, trainers, evaluation and decoders use of a state."""

    carried: bool

    @property
    def offset(self) -> int: ...

    def advance(self, n: int) -> None: ...

    def state_dict(self) -> dict:
        """Tensors and plain values (int, float, bool, None) by name; ``load_state_dict`` of
        it restores the state bitwise (the trainer checkpoints a carried state with it)."""

    def load_state_dict(self, state: dict) -> None: ...

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (b',) in that order (beam search: the surviving beams)."""

    def reset(self, rows: Tensor | None = None) -> None:
        """Forget batch rows ``rows`` (a long index or a (b,) bool mask); None = all rows."""


def row_mask(rows: Tensor | None, b: int, device: torch.device | None = None) -> Tensor | None:
    """``rows`` as a (b,) bool mask on ``device``; None stays None (all rows)."""
    if rows is None:
        return None
    rows = torch.as_tensor(rows, device=device)
    if rows.dtype == torch.bool:
        if tuple(rows.shape) != (b,):
            raise ValueError(f"a boolean rows mask must have shape ({b},), got {tuple(rows.shape)}")
        return rows
    if rows.dim() > 1 or rows.is_floating_point():
        raise TypeError(f"rows must be a 1-D integer index or a (b,) bool mask, got {rows.dtype} "
                        f"of shape {tuple(rows.shape)}")
    if rows.numel() and (int(rows.min()) < -b or int(rows.max()) >= b):
        raise ValueError(f"rows {rows.tolist()} are outside a batch of {b} rows")
    mask = torch.zeros(b, dtype=torch.bool, device=device)
    mask[rows.long()] = True
    return mask
