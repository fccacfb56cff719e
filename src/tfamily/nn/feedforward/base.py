"""The feed-forward Protocol: what runs at each position.

Every feed-forward part is called ``ff(x, *, state=None, padding=None)``: position-wise
parts ignore both keywords; a part that mixes positions (``sepconv``) reads the padding and
carries what it needs between decoding calls in the layer's state.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor

from ..state import LayerState


class FeedForward(Protocol):
    """``x``: (b, n, d) -> (b, n, d). ``state``: the layer's ``LayerState`` (or None);
    ``padding``: (b, n) bool over x, True = real position (``own_padding``)."""

    def __call__(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor: ...


def own_padding(key_padding: Tensor | None, n: int) -> Tensor | None:
    """The columns of a self-attention ``key_padding`` that cover the ``n`` new positions: with
    a KV cache it covers the cached keys first, then this call's."""
    return None if key_padding is None else key_padding[:, key_padding.shape[1] - n:]
