"""The depth Protocol: how layers repeat, as the model sees it.

A depth maps the stream ``x`` (b, n, d) to (b, n, d) through its layers, threading the
model's state (one ``LayerState`` per layer for stacks, an ``RNNState`` for a recurrent
stack) and the keyword arguments the layers take (``key_padding``, and for a decoder
``context`` and ``context_padding``). ``len(depth)`` is how many layers (or shared-weight
steps) it runs: the size of a fresh per-layer state. ``offset`` (given only when the model
moves positions, e.g. per-row randomized offsets) is the position of the first token, for a
depth that adds position signals itself (the UT's coordinate); the others ignore it. The model
never asks which depth it holds.
"""
from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor


class Depth(Protocol):
    def __len__(self) -> int: ...

    def __call__(self, x: Tensor, *, state: Any = None, key_padding: Tensor | None = None,
                 offset: int | Tensor | None = None, **kw: Any) -> Tensor: ...
