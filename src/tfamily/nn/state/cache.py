"""Per-layer caches. ``KVCache`` holds a layer's keys and values for incremental decoding; it
grows by doubling so appending a token is amortised O(1) copies. ``LayerState`` bundles
what one layer carries: its self-attention cache, its cross-attention cache (encoder
keys/values, computed once), XL memory (with which of its rows are real) and ``parts``, what
another part of the layer carries between decoding calls (a causal convolution's last
inputs, ``nn/feedforward/sepconv.py``). ``CacheState`` is the KV-cache kind of ``State``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .base import row_mask
from ...registry import STATES


class KVCache:
    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0
        # (b,) columns of left padding per row (prompts of different lengths in one batch), or None
        self.pads: Tensor | None = None

    @property
    def start(self) -> int | Tensor:
        """The position of the next token: the cached length, or per row (b,) the cached length
        less the row's left padding, so a padded row counts positions from its first real token."""
        return self.length if self.pads is None else self.length - self.pads

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
        if self.pads is not None:
            self.pads = self.pads.index_select(0, index)

    def clear(self) -> None:
        self._k = self._v = None
        self.length = 0
        self.pads = None


@dataclass
class LayerState:
    cache: KVCache | None = None
    cross_cache: KVCache | None = None
    memory: Tensor | None = None  # XL: detached layer inputs of the previous segment, (b, mem_len, d)
    # (b, mem_len) bool, True on memory entries a row may attend to; None = all (no row was reset)
    memory_padding: Tensor | None = None
    inputs: Tensor | None = None  # this call's layer input, recorded for the next memory
    # (b, n, mem + n) bool for the next call only: which keys each of its n queries may see, over
    # [memory; x] (streams that restart inside a segment, a window: ``SegmentMemory.restrict``)
    key_mask: Tensor | None = None
    # Rolling inputs a part carries between decoding calls, (b, ...) each, batch first, detached,
    # by a name the part picks: e.g. a causal convolution's last k - 1 inputs ("ff.inner").
    parts: dict[str, Tensor] = field(default_factory=dict)

    def record(self, x: Tensor) -> None:
        """The depth hands over the layer's input ``x`` (b, n, d); the state decides what to
        keep (XL: it becomes the next segment's memory in ``advance``)."""
        self.inputs = x

    def attention_memory(self, key_padding: Tensor | None, x: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The memory this layer's self-attention prepends to its keys, and the key padding
        over ``[memory; x]`` (``key_padding`` covers ``x`` (b, n, d) only): rows that were
        reset must not see the memory of the stream they left. With a ``key_mask`` the padding is
        per query, (b, n, mem + n): the mask and the padding together."""
        padding = key_padding
        if self.memory is not None and (self.memory_padding is not None or key_padding is not None):
            b, n = x.shape[:2]
            mem = self.memory_padding if self.memory_padding is not None else \
                torch.ones(b, self.memory.shape[1], dtype=torch.bool, device=x.device)
            own = key_padding if key_padding is not None else torch.ones(b, n, dtype=torch.bool, device=x.device)
            padding = torch.cat([mem, own], dim=1)
        if self.key_mask is None:
            return self.memory, padding
        b, n = x.shape[:2]
        m = n + (0 if self.memory is None else self.memory.shape[1])
        if tuple(self.key_mask.shape) != (b, n, m):
            raise ValueError(f"key_mask has shape {tuple(self.key_mask.shape)}; this call needs (batch, queries, "
                             f"memory + queries) = {(b, n, m)} (restrict the state for the segment it runs)")
        return self.memory, self.key_mask if padding is None else self.key_mask & padding[:, None, :]

    def reorder(self, index: Tensor) -> None:
        for c in (self.cache, self.cross_cache):
            if c is not None:
                c.reorder(index)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, index)
        if self.memory_padding is not None:
            self.memory_padding = self.memory_padding.index_select(0, index)
        if self.key_mask is not None:
            self.key_mask = self.key_mask.index_select(0, index)
        self.parts = {name: t.index_select(0, index) for name, t in self.parts.items()}


class CacheState(list):
    """Per-layer KV caches for incremental decoding: the offset is the cached length."""
    citation = ("Vaswani et al. 2017, section 3.2.3: a decoder step sees only earlier positions, so their keys and "
                "values are cached")

    carried = False

    @property
    def offset(self) -> int | Tensor:
        """The cached length; a (b,) tensor of per-row positions after ``pad_left``."""
        cache = self[0].cache if self else None
        return 0 if cache is None else cache.start

    def pad_left(self, pads: Tensor) -> None:
        """Rows begin with ``pads`` (b,) columns of left padding: positions count from each row's
        first real token (the callers mask the padding with ``key_padding``). Set before the
        first call; ``reset`` forgets it."""
        if any(s.cache is not None and s.cache.length for s in self):
            raise ValueError("pad_left must come before the first call: this cache already holds "
                             "tokens; make a new state with model.new_state()")
        if pads.dim() != 1 or pads.dtype.is_floating_point or pads.dtype == torch.bool:
            raise ValueError(f"pads must be a (batch,) integer tensor, got {pads.dtype} of shape {tuple(pads.shape)}")
        for s in self:
            if s.cache is not None:
                s.cache.pads = pads.clone()

    def advance(self, n: int) -> None:
        """Nothing to do: attention appended this call's keys and values already."""

    def state_dict(self) -> dict:
        out: dict = {}
        for i, s in enumerate(self):
            for kind, c in (("cache", s.cache), ("cross", s.cross_cache)):
                if c is not None and c.kv is not None:
                    out[f"{kind}.{i}.k"], out[f"{kind}.{i}.v"] = (t.clone() for t in c.kv)
            out.update({f"part.{i}.{name}": t.clone() for name, t in s.parts.items()})
        pads = self[0].cache.pads if self and self[0].cache is not None else None
        if pads is not None:
            out["pads"] = pads.clone()
        return out

    def load_state_dict(self, state: dict) -> None:
        for i, s in enumerate(self):
            for kind, c in (("cache", s.cache), ("cross", s.cross_cache)):
                if c is None:
                    continue
                c.clear()
                if f"{kind}.{i}.k" in state:
                    k, v = state[f"{kind}.{i}.k"], state[f"{kind}.{i}.v"]
                    c.append(k, v) if kind == "cache" else c.set(k, v)
            prefix = f"part.{i}."
            s.parts = {key[len(prefix):]: t.clone() for key, t in state.items() if key.startswith(prefix)}
            if s.cache is not None and "pads" in state:
                s.cache.pads = state["pads"].clone()

    def reorder(self, index: Tensor) -> None:
        for s in self:
            s.reorder(index)

    def reset(self, rows: Tensor | None = None) -> None:
        """All rows only: the layers' caches share one length, so a single row cannot
        restart; decode rows that restart as a batch of their own."""
        b = next((s.cache.kv[0].shape[0] for s in self if s.cache is not None and s.cache.kv is not None), None)
        mask = row_mask(rows, b) if rows is not None and b is not None else None
        if mask is not None and not bool(mask.all()):
            raise ValueError(f"a KV cache cannot forget some rows ({mask.nonzero().flatten().tolist()} of {b}): "
                             f"its rows share one length; reset all rows (rows=None) or decode them apart")
        for s in self:
            for c in (s.cache, s.cross_cache):
                if c is not None:
                    c.clear()
            s.parts = {}


def new_state(n_layers: int, *, cache: bool = True, cross: bool = False) -> CacheState:
    return CacheState(LayerState(cache=KVCache() if cache else None, cross_cache=KVCache() if cross else None)
                      for _ in range(n_layers))


def reorder_state(state: list[LayerState], index: Tensor) -> None:
    """Keep rows ``index`` of every layer (a list of ``LayerState`` without a State around it)."""
    for s in state:
        s.reorder(index)


def per_call(layers) -> None:
    # Nothing crosses calls; decoding still builds its KV cache per layer (models/generate.py).
    return None


# name -> make(**needs) -> new_state(**kw) | None (None: the model's KV cache per layer).
STATES.register("none", per_call, needs=("layers",))
STATES.register("kv_cache", per_call, needs=("layers",))
