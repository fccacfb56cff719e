"""Batches of (x, y) next-token pairs cut from one 1-D token tensor.

Every loader here indexes the corpus tensor through a strided view
(`unfold`, `view`); a batch costs one gather of `batch_size * (seq_len + 1)`
tokens (plus the cast to `dtype`), never a copy of the corpus. x and y are
two views of that one buffer, offset by a token: `y[:, t] == x[:, t + 1]`.
Shapes are batch first: x, y are (batch_size, seq_len).

Distributed convention (every loader): `batch_size` is per rank; the global
batch is `batch_size * world_size` rows, and rank r owns rows
`r * batch_size ... (r + 1) * batch_size - 1` of it. The global batch is the
same whatever the world size, so N ranks of batch b see exactly the rows one
process of batch N * b sees, and a checkpoint written by rank 0 (its state
holds no rank) resumes every rank.

- `RandomWindows`: uniformly random windows, infinite, resumable by step.
- `StreamBatches`: contiguous streams for recurrent-memory models
  (Transformer-XL): row r of batch t + 1 continues row r of batch t.
- `eval_batches`: one deterministic, non-overlapping pass for evaluation.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import numpy as np
import torch
from ..base import numbers

__all__ = ["RandomWindows", "StreamBatches", "EvalBatches", "eval_batches"]

_MASK64 = (1 << 64) - 1
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32)


def _as_tokens(data) -> torch.Tensor:
    """Accept a 1-D integer tensor or numpy array without copying it."""
    if isinstance(data, np.ndarray):
        with warnings.catch_warnings():
            # A read-only array (e.g. a memory map) is fine: loaders never write to it.
            warnings.simplefilter("ignore", UserWarning)
            data = torch.from_numpy(data)
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"data must be a 1-D torch tensor or numpy array of token ids, got {type(data).__name__}")
    if data.dtype not in _INT_DTYPES:
        raise TypeError(f"data must hold integer token ids, got dtype {data.dtype}")
    if data.ndim != 1:
        raise ValueError(f"data must be 1-D (the token stream), got shape {tuple(data.shape)}; flatten it first")
    return data


def _check_int(name: str, value, minimum: int) -> int:
    return numbers.check_int(name, value, minimum)


def _check_shard(rank, world_size) -> tuple[int, int]:
    world_size = _check_int("world_size", world_size, 1)
    rank = _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1} for world_size={world_size}, got {rank}")
    return rank, world_size


def _splitmix64(x: int) -> int:
    # Steele et al. 2014: a bijective mixer, so (seed, step) pairs give
    # well-spread, uncorrelated generator seeds.
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _check_state(state, kind: str, expected: dict) -> None:
    if not isinstance(state, dict) or state.get("type") != kind:
        raise ValueError(f"not a {kind} state dict: {state!r}")
    diffs = [f"{k}: saved {state.get(k)!r}, here {v!r}" for k, v in expected.items() if state.get(k) != v]
    if diffs:
        raise ValueError(f"{kind} state does not match this loader ({'; '.join(diffs)}); build it with the saved settings")


class RandomWindows:
    """Infinite stream of random windows; batch i depends only on (seed, i).

    Each step seeds a fresh generator from (seed, step), so the state is two
    ints: resuming from `state_dict()` reproduces the uninterrupted stream
    exactly, with no generator bytes to save.

    data: (n,) integer tokens; yields x, y: (batch_size, seq_len) of `dtype`
    (None keeps the data's dtype).
    """

    def __init__(self, data, seq_len: int, batch_size: int, *, seed: int = 0, rank: int = 0,
                 world_size: int = 1, dtype: torch.dtype | None = torch.long):
        self.data = _as_tokens(data)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = _check_int("seed", seed, 0)
        self.rank, self.world_size = _check_shard(rank, world_size)
        self.dtype = dtype
        if len(self.data) < self.seq_len + 1:
            raise ValueError(f"data has {len(self.data)} tokens; a window needs seq_len + 1 = {self.seq_len + 1}; "
                             f"lower data.seq_len or use a longer text")
        # (n - seq_len, seq_len + 1) view: row s is the window starting at s.
        self._windows = self.data.unfold(0, self.seq_len + 1, 1)
        self.step = 0

    def sample(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number `step` (pure: does not advance the stream)."""
        g = torch.Generator().manual_seed(_splitmix64(_splitmix64(self.seed) ^ step) >> 1)
        starts = torch.randint(0, len(self._windows), (self.batch_size * self.world_size,), generator=g)
        mine = starts[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        w = self._windows[mine]  # the one gather: (batch_size, seq_len + 1)
        if self.dtype is not None:
            w = w.to(self.dtype)
        return w[:, :-1], w[:, 1:]

    def __iter__(self) -> "RandomWindows":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = self.sample(self.step)
        self.step += 1
        return batch

    def shard(self, rank: int, world_size: int) -> "RandomWindows":
        """This stream as seen by `rank` of `world_size` (see the module's convention)."""
        out = RandomWindows(self.data, self.seq_len, self.batch_size, seed=self.seed, rank=rank,
                            world_size=world_size, dtype=self.dtype)
        out.step = self.step
        return out

    def state_dict(self) -> dict:
        """JSON-serialisable position; the same on every rank."""
        return {"type": "RandomWindows", "seed": self.seed, "step": self.step, "seq_len": self.seq_len,
                "global_batch": self.batch_size * self.world_size, "n_tokens": len(self.data)}

    def load_state_dict(self, state: dict) -> None:
        _check_state(state, "RandomWindows", {"seq_len": self.seq_len, "n_tokens": len(self.data),
                                              "global_batch": self.batch_size * self.world_size})
        self.seed = _check_int("state['seed']", state["seed"], 0)
        self.step = _check_int("state['step']", state["step"], 0)


class StreamBatches:
    """Contiguous streaming batches (Dai et al. 2019, Transformer-XL).

    The tokens are cut into `batch_size * world_size` equal streams, one per
    global row; batch t holds tokens t*seq_len .. (t+1)*seq_len of every
    stream, so row r of batch t + 1 continues row r of batch t exactly:
    `x_{t+1}[r, 0] == y_t[r, -1]`. A memory carried across batches therefore
    always belongs to the same text. Tokens past the last full segment are
    dropped (fewer than global_batch * seq_len + global_batch).

    Iterating yields the remaining batches of the current epoch, then rewinds
    (position 0, epoch + 1), so `for epoch ...: for x, y in batches:` works.
    """

    def __init__(self, data, seq_len: int, batch_size: int, *, rank: int = 0, world_size: int = 1,
                 dtype: torch.dtype | None = torch.long):
        self.data = _as_tokens(data)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.rank, self.world_size = _check_shard(rank, world_size)
        self.dtype = dtype
        rows = self.batch_size * self.world_size
        stream_len = len(self.data) // rows
        if stream_len < self.seq_len + 1:
            raise ValueError(
                f"data has {len(self.data)} tokens: too few for {rows} streams (batch_size * world_size) "
                f"of seq_len + 1 = {self.seq_len + 1} tokens; lower batch_size or seq_len"
            )
        streams = self.data[: stream_len * rows].reshape(rows, stream_len)  # a view for contiguous data
        self.streams = streams[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        self.n_batches = (stream_len - 1) // self.seq_len
        self.position = 0
        self.epoch = 0

    def __len__(self) -> int:
        return self.n_batches

    def batch(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch t of an epoch: x, y of shape (batch_size, seq_len)."""
        if not 0 <= t < self.n_batches:
            raise IndexError(f"batch {t} out of range; an epoch has {self.n_batches} batches")
        start = t * self.seq_len
        w = self.streams[:, start : start + self.seq_len + 1]
        if self.dtype is not None:
            w = w.to(self.dtype)
        return w[:, :-1], w[:, 1:]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while self.position < self.n_batches:
            t = self.position
            # Advance before yielding so a checkpoint taken after training on
            # batch t resumes at t + 1.
            self.position += 1
            yield self.batch(t)
        self.position = 0
        self.epoch += 1

    def shard(self, rank: int, world_size: int) -> "StreamBatches":
        """This stream as seen by `rank` of `world_size`: disjoint rows per rank."""
        out = StreamBatches(self.data, self.seq_len, self.batch_size, rank=rank, world_size=world_size,
                            dtype=self.dtype)
        out.position, out.epoch = self.position, self.epoch
        return out

    def state_dict(self) -> dict:
        """JSON-serialisable position; the same on every rank."""
        return {"type": "StreamBatches", "position": self.position, "epoch": self.epoch, "seq_len": self.seq_len,
                "global_batch": self.batch_size * self.world_size, "n_tokens": len(self.data)}

    def load_state_dict(self, state: dict) -> None:
        _check_state(state, "StreamBatches", {"seq_len": self.seq_len, "n_tokens": len(self.data),
                                              "global_batch": self.batch_size * self.world_size})
        position = _check_int("state['position']", state["position"], 0)
        if position > self.n_batches:
            raise ValueError(f"state position {position} is past the epoch's {self.n_batches} batches")
        self.position = position
        self.epoch = _check_int("state['epoch']", state["epoch"], 0)


class EvalBatches:
    """Non-overlapping windows in order: every target token is scored once.

    Window i predicts tokens i*seq_len + 1 .. (i+1)*seq_len from the seq_len
    tokens before each; the tail shorter than a window is not scored.
    `n_tokens` is the number of scored tokens (for averaging the loss).
    """

    def __init__(self, data, seq_len: int, batch_size: int, max_tokens: int | None = None,
                 dtype: torch.dtype | None = torch.long):
        self.data = _as_tokens(data)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.dtype = dtype
        n_windows = (len(self.data) - 1) // self.seq_len
        if n_windows < 1:
            raise ValueError(f"data has {len(self.data)} tokens; evaluation needs seq_len + 1 = {self.seq_len + 1}; "
                             f"lower data.seq_len or use a longer text")
        if max_tokens is not None:
            max_tokens = _check_int("max_tokens", max_tokens, self.seq_len)
            n_windows = min(n_windows, max_tokens // self.seq_len)
        # (n_windows, seq_len + 1) view; neighbours share one boundary token.
        self._windows = self.data.unfold(0, self.seq_len + 1, self.seq_len)[:n_windows]
        self.n_tokens = n_windows * self.seq_len

    def __len__(self) -> int:
        return math.ceil(len(self._windows) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(0, len(self._windows), self.batch_size):
            w = self._windows[i : i + self.batch_size]
            if self.dtype is not None:
                w = w.to(self.dtype)
            yield w[:, :-1], w[:, 1:]


def eval_batches(data, seq_len: int, batch_size: int, max_tokens: int | None = None,
                 dtype: torch.dtype | None = torch.long) -> EvalBatches:
    """A deterministic pass over a split in (batch_size, seq_len) batches; the last may be smaller.

    max_tokens caps the number of scored tokens (rounded down to whole windows).
    """
    return EvalBatches(data, seq_len, batch_size, max_tokens=max_tokens, dtype=dtype)
