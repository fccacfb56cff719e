"""Segment memory: the Transformer-XL state (Dai et al. 2019, section 3.2).

Each layer n attends over its input from the previous segment as well as the
current one:  h~_{t+1}^{n-1} = [SG(h_t^{n-1}) o h_{t+1}^{n-1}],  k, v = h~ W_k, h~ W_v,
where SG is stop-gradient. ``Stack`` records every layer's input in its
``LayerState.inputs``; this module is the policy that turns those inputs into the
next segment's memory: ``cat(memory, inputs)[:, -mem_len:].detach()``.

The same state threads through training (contiguous streams: row r of batch t+1
continues row r of batch t), evaluation (segment by segment, possibly with a
longer ``mem_len`` than in training, section 3.2 "longer at evaluation") and
generation (every decoded token is a segment of length 1).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .base import row_mask
from .cache import LayerState
from ..patterns.base import SoftPattern
from ...registry import STATES
from ...base.numbers import check_int


def next_memory(memory: Tensor | None, inputs: Tensor | None, mem_len: int) -> Tensor | None:
    """The newest ``mem_len`` hidden states of ``[memory; inputs]``, (b, <= mem_len, d), detached.

    Detaching is the SG in the equation above: gradients stop at the segment
    boundary, so training cost does not grow with the length of the stream.
    """
    if mem_len == 0 or inputs is None:
        return None
    full = inputs if memory is None else torch.cat([memory.to(inputs.dtype), inputs], dim=1)
    return full[:, -mem_len:].detach()


def next_padding(padding: Tensor | None, n: int, mem_len: int) -> Tensor | None:
    """Which entries of the next memory are real, following ``next_memory``: this segment's
    ``n`` inputs are; older entries keep their flag. None when every entry is real."""
    if padding is None or mem_len == 0:
        return None
    full = torch.cat([padding, padding.new_ones(padding.shape[0], n)], dim=1)[:, -mem_len:]
    return None if bool(full.all()) else full


class SegmentMemory(list):
    """A ``State`` (``base.py``) carrying XL memory from one call of the model to the next.

    ``offset`` counts the tokens already seen (the absolute position of the next
    segment's first token, for absolute position encodings). ``limits`` holds, per
    layer, an optional callable giving how many memory entries that layer can still
    use (an adaptive span shorter than ``mem_len``), so memory it cannot see is
    neither kept nor projected.
    """
    citation = "Dai et al. 2019, section 3.2: h~ = [SG(h_{t}^{n-1}) o h_{t+1}^{n-1}], mem_len layer inputs"

    carried = True  # the trainer keeps it across batches of a contiguous stream

    def __init__(self, n_layers: int, mem_len: int,
                 limits: Sequence[Callable[[], int] | None] | None = None):
        check_int("mem_len", mem_len, 0)
        limits = list(limits) if limits is not None else [None] * n_layers
        if len(limits) != n_layers:
            raise ValueError(f"got {len(limits)} memory limits for {n_layers} layers")
        super().__init__(LayerState() for _ in range(n_layers))
        self.mem_len, self.limits, self.offset = mem_len, limits, 0

    def layer_mem_len(self, i: int) -> int:
        limit = self.limits[i]
        return self.mem_len if limit is None else max(0, min(self.mem_len, int(limit())))

    def advance(self, n: int) -> None:
        """After a segment of ``n`` tokens: fold each layer's recorded inputs into its memory."""
        for i, s in enumerate(self):
            if s.inputs is not None and s.inputs.shape[1] != n:
                raise ValueError(f"layer {i} recorded {s.inputs.shape[1]} inputs for a segment of {n} tokens")
            s.memory_padding = next_padding(s.memory_padding, n, self.layer_mem_len(i)) \
                if s.inputs is not None else s.memory_padding
            s.memory = next_memory(s.memory, s.inputs, self.layer_mem_len(i))
            s.inputs = s.key_mask = None  # drop the reference to this segment's graph; a mask serves one call
        self.offset += n

    def restrict(self, n: int, *, starts: Tensor | None = None, window: int | None = None) -> None:
        """Limit what each query of the next segment (``n`` tokens) sees, as if the segment
        were fed one token at a time with ``reset`` before token t in the rows where
        ``starts[:, t]`` (b, n) bool, and a memory of ``window`` entries: query t of row r sees
        keys at segment positions s <= t with s >= t - window and s >= the row's latest start
        at or before t (memory entries sit at s < 0). That is what an RL replay needs: a
        rollout acted step by step, with episodes that end inside it, recomputed as one
        segment (``rl/torso.py``). The masks serve one call; ``advance`` drops them."""
        check_int("window", window, 0, none=True)
        rows = next((x.shape[0] for x in [starts, *(s.memory for s in self)] if x is not None), None)
        if rows is None:
            raise ValueError("restrict needs starts or a memory to know the batch size")
        device = starts.device if starts is not None else next(s.memory.device for s in self if s.memory is not None)
        t = torch.arange(n, device=device)
        last = torch.full((rows, n), -(1 << 62), dtype=torch.long, device=device)
        if starts is not None:
            if starts.dtype != torch.bool or tuple(starts.shape) != (rows, n):
                raise ValueError(f"starts must be a (batch, {n}) bool tensor, got {starts.dtype} of shape "
                                 f"{tuple(starts.shape)}")
            last = torch.where(starts, t, last).cummax(dim=1).values                   # (b, n)
        for s in self:
            src = torch.arange(-(0 if s.memory is None else s.memory.shape[1]), n, device=device)  # key positions
            ok = (src[None, None] <= t[None, :, None]) & (src[None, None] >= last[:, :, None])
            if window is not None:
                ok = ok & (src[None, None] >= t[None, :, None] - window)
            s.key_mask = ok

    def reset(self, rows: Tensor | None = None) -> None:
        """Forget rows ``rows`` (None: all, e.g. a new epoch of the stream). A forgotten row's
        memory entries are masked out of attention (``LayerState.attention_memory``) until
        newer segments push them out, so that row continues as if its stream began now;
        the other rows keep theirs. ``offset`` is shared by the rows and kept (relative
        positions do not use it)."""
        b = next((s.memory.shape[0] for s in self if s.memory is not None), None)
        mask = row_mask(rows, b) if rows is not None and b is not None else None
        if rows is None or (mask is not None and bool(mask.all())):
            for s in self:
                s.memory = s.inputs = s.memory_padding = s.key_mask = None
            self.offset = 0
            return
        if mask is None or not bool(mask.any()):
            return
        for s in self:
            if s.memory is not None:
                keep = s.memory_padding if s.memory_padding is not None else \
                    torch.ones(s.memory.shape[:2], dtype=torch.bool, device=s.memory.device)
                s.memory_padding = keep & ~mask.to(keep.device)[:, None]

    def reorder(self, index: Tensor) -> None:
        for s in self:
            s.reorder(index)

    def state_dict(self) -> dict:
        out: dict = {"offset": self.offset, "mem_len": self.mem_len}
        for i, s in enumerate(self):
            if s.memory is not None:
                out[f"memory.{i}"] = s.memory
            if s.memory_padding is not None:
                out[f"memory_padding.{i}"] = s.memory_padding
        return out

    def load_state_dict(self, state: dict) -> None:
        if state.get("mem_len", self.mem_len) != self.mem_len:
            raise ValueError(f"saved memory has mem_len={state['mem_len']}, this state {self.mem_len}; "
                             f"build the state with new_state(mem_len={state['mem_len']})")
        for i, s in enumerate(self):
            s.memory, s.memory_padding = state.get(f"memory.{i}"), state.get(f"memory_padding.{i}")
            s.inputs = None
        self.offset = int(state["offset"])

    @property
    def memory_lengths(self) -> list[int]:
        return [0 if s.memory is None else s.memory.shape[1] for s in self]


def xl_memory(layers, mem_len: int) -> Callable[..., SegmentMemory]:
    # Dai et al. 2019, section 3.2: memory of mem_len layer inputs; a layer whose soft pattern
    # sees fewer keys (adaptive span) keeps only what it can see.
    limits = [p.memory_needed if isinstance(p, SoftPattern) else None for p in (b.attn.pattern for b in layers.blocks)]

    def make(mem_len: int = mem_len) -> SegmentMemory:
        return SegmentMemory(len(layers), mem_len, limits)
    return make


# carried: the state crosses segments, so the trainer streams contiguous segments for it (train/resolve.py).
STATES.register("xl_memory", xl_memory, needs=("layers", "mem_len"), carried=True)
