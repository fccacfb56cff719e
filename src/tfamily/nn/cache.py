"""The state axis: what crosses step or segment boundaries.

``KVCache`` holds a layer's keys and values for incremental decoding; it grows by
doubling so appending a token is amortised O(1) copies. ``LayerState`` bundles
what one layer carries: its self-attention cache, its cross-attention cache
(encoder keys/values, computed once) and XL memory.

A model's whole state is a ``State``: one ``LayerState`` per layer plus the two things
the model itself asks of it, whatever the kind: ``offset`` (the absolute position of
the next token, for position encodings) and ``advance(n)`` (called once after every
call over ``n`` new tokens). ``carried`` says whether a trainer keeps the state from one
training batch to the next (XL memory: yes; a decoding cache: no). ``CacheState`` is
the KV-cache kind; ``nn/memory.SegmentMemory`` the XL kind. A new kind of state is a
new class here, not a branch in the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor


class KVCache:
    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(b, h_kv, t, e)`` keys/values; return all keys/values so far."""
        t = k.shape[-2]
        if self._k is None or self.length + t > self._k.shape[-2]:
            cap = max(2 * (self.length + t), 16)
            nk = k.new_empty(*k.shape[:-2], cap, k.shape[-1])
            nv = v.new_empty(*v.shape[:-2], cap, v.shape[-1])
            if self._k is not None:
                nk[..., : self.length, :] = self._k[..., : self.length, :]
                nv[..., : self.length, :] = self._v[..., : self.length, :]
            self._k, self._v = nk, nv
        self._k[..., self.length: self.length + t, :] = k
        self._v[..., self.length: self.length + t, :] = v
        self.length += t
        return self._k[..., : self.length, :], self._v[..., : self.length, :]

    def set(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store static keys/values (cross-attention)."""
        self._k, self._v, self.length = k, v, k.shape[-2]
        return k, v

    @property
    def kv(self) -> tuple[Tensor, Tensor] | None:
        if self._k is None:
            return None
        return self._k[..., : self.length, :], self._v[..., : self.length, :]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving beams)."""
        if self._k is not None:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)


@dataclass
class LayerState:
    cache: KVCache | None = None
    cross_cache: KVCache | None = None
    memory: Tensor | None = None  # XL: detached layer inputs of the previous segment, (b, mem_len, d)
    inputs: Tensor | None = None  # this call's layer input, recorded for the next memory


@runtime_checkable
class State(Protocol):
    """What models and trainers use of a state (besides indexing its layers)."""

    carried: bool

    @property
    def offset(self) -> int: ...

    def advance(self, n: int) -> None: ...


class CacheState(list):
    """Per-layer KV caches for incremental decoding: the offset is the cached length."""

    carried = False

    @property
    def offset(self) -> int:
        cache = self[0].cache if self else None
        return 0 if cache is None else cache.length

    def advance(self, n: int) -> None:
        """Nothing to do: attention appended this call's keys and values already."""


def new_state(n_layers: int, *, cache: bool = True, cross: bool = False) -> CacheState:
    return CacheState(LayerState(cache=KVCache() if cache else None, cross_cache=KVCache() if cross else None)
                      for _ in range(n_layers))


def reorder_state(state: list[LayerState], index: Tensor) -> None:
    for s in state:
        for c in (s.cache, s.cross_cache):
            if c is not None:
                c.reorder(index)
        if s.memory is not None:
            s.memory = s.memory.index_select(0, index)
