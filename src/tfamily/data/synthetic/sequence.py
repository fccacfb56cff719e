"""Sequence-manipulation tasks: copy, reverse, duplicate, associative recall.

All four are language-modelling tasks ("lm"): the model reads the whole
sequence causally and is scored only on the part it has to reproduce.
"""
from __future__ import annotations

import torch

from .base import Batch, as_generator, check_batch_size, check_int, check_lengths, lm_pair

__all__ = ["CopyTask", "ReverseTask", "DuplicateTask", "AssociativeRecallTask"]


def _init_copy_like(task, n_symbols: int, min_len: int, max_len: int) -> None:
    """The sizes of a `w SEP w'` task: PAD, SEP and n_symbols symbols; inputs of 2 * max_len tokens."""
    task.n_symbols = check_int(task.name, "n_symbols", n_symbols, 1)
    task.min_len, task.max_len = check_lengths(task.name, min_len, max_len)
    task.vocab_size = task.n_symbols + 2
    task.seq_len = 2 * task.max_len


def _sample_copy_like(task, batch_size: int, generator, reverse: bool) -> Batch:
    """Sequences `w SEP w'` (w' = w or reversed w), right-padded with PAD."""
    b = check_batch_size(task.name, batch_size)
    g = as_generator(generator)
    m = task.max_len
    lengths = torch.randint(task.min_len, m + 1, (b, 1), generator=g)
    w = torch.randint(task.SYMBOL0, task.SYMBOL0 + task.n_symbols, (b, m), generator=g)
    pos = torch.arange(2 * m + 1).expand(b, -1)
    first = pos < lengths
    second = (pos > lengths) & (pos <= 2 * lengths)
    # Position p of the second half copies w[p - L - 1], or w[2L - p] when reversed.
    src = (2 * lengths - pos) if reverse else (pos - lengths - 1)
    seq = torch.full((b, 2 * m + 1), task.PAD, dtype=torch.long)
    seq = torch.where(first, w.gather(1, pos.clamp(max=m - 1)), seq)
    seq = torch.where(pos == lengths, torch.full_like(seq, task.SEP), seq)
    seq = torch.where(second, w.gather(1, src.clamp(0, m - 1)), seq)
    inp, tgt = lm_pair(seq)
    t = pos[:, :-1]
    # Target t is token t + 1: the second copy occupies tokens L+1..2L.
    loss_mask = (t >= lengths) & (t < 2 * lengths)
    return Batch(inp, tgt, loss_mask, t < 2 * lengths)


class CopyTask:
    """Copy a random string: `w SEP w`, loss on the second w.

    Tokens: PAD = 0, SEP = 1, symbols 2 .. n_symbols + 1 (vocab_size =
    n_symbols + 2). |w| is uniform in [min_len, max_len]; inputs are padded
    on the right to seq_len = 2 * max_len.
    """

    name, kind = "copy", "lm"
    PAD, SEP, SYMBOL0 = 0, 1, 2

    def __init__(self, n_symbols: int = 8, min_len: int = 1, max_len: int = 16):
        _init_copy_like(self, n_symbols, min_len, max_len)

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        return _sample_copy_like(self, batch_size, generator, reverse=False)


class ReverseTask:
    """Reverse a random string: `w SEP reversed(w)`, loss on the reversed w.

    Tokens and lengths as CopyTask: PAD = 0, SEP = 1, symbols 2 .. n_symbols + 1.
    """

    name, kind = "reverse", "lm"
    PAD, SEP, SYMBOL0 = 0, 1, 2

    def __init__(self, n_symbols: int = 8, min_len: int = 1, max_len: int = 16):
        _init_copy_like(self, n_symbols, min_len, max_len)

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        return _sample_copy_like(self, batch_size, generator, reverse=True)


class DuplicateTask:
    """Kitaev et al. 2020 (Reformer), section 5: sequences `0 w 0 w`.

    Tokens: 0 is the separator, symbols are 1 .. n_symbols (vocab_size =
    n_symbols + 1); |w| = length, fixed. The full sequence has 2 * length + 2
    tokens, so input and target have seq_len = 2 * length + 1; the loss
    covers only the second w, which a model can produce only by attending
    back `length + 1` positions. Defaults give the paper's 1024-token sequences.
    """

    name, kind = "duplicate", "lm"
    SEP, SYMBOL0 = 0, 1

    def __init__(self, n_symbols: int = 127, length: int = 511):
        self.n_symbols = check_int(self.name, "n_symbols", n_symbols, 1)
        self.length = check_int(self.name, "length", length, 1)
        self.vocab_size = self.n_symbols + 1
        self.seq_len = 2 * self.length + 1

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        b = check_batch_size(self.name, batch_size)
        g = as_generator(generator)
        w = torch.randint(self.SYMBOL0, self.SYMBOL0 + self.n_symbols, (b, self.length), generator=g)
        sep = torch.full((b, 1), self.SEP, dtype=torch.long)
        inp, tgt = lm_pair(torch.cat([sep, w, sep, w], dim=1))
        t = torch.arange(self.seq_len).expand(b, -1)
        loss_mask = t >= self.length + 1  # targets 0 w 0 | w: the last `length` positions
        return Batch(inp, tgt, loss_mask, torch.ones_like(inp, dtype=torch.bool))


class AssociativeRecallTask:
    """Associative recall: `k1 v1 k2 v2 ... kn vn ? kq vq`, loss on vq only.

    Tokens: QUERY ('?') = 0, keys 1 .. n_keys, values n_keys + 1 ..
    n_keys + n_values (vocab_size = 1 + n_keys + n_values). The n_pairs keys
    of a sequence are distinct; values may repeat; kq is one of the keys and
    vq its value. seq_len = 2 * n_pairs + 2; only the last position is scored.
    """

    name, kind = "associative_recall", "lm"
    QUERY, KEY0 = 0, 1

    def __init__(self, n_keys: int = 16, n_values: int = 16, n_pairs: int = 8):
        self.n_keys = check_int(self.name, "n_keys", n_keys, 1)
        self.n_values = check_int(self.name, "n_values", n_values, 1)
        self.n_pairs = check_int(self.name, "n_pairs", n_pairs, 1)
        if self.n_pairs > self.n_keys:
            raise ValueError(
                f"{self.name}: n_pairs={n_pairs} needs that many distinct keys but n_keys={n_keys}; "
                "raise n_keys or lower n_pairs"
            )
        self.VALUE0 = 1 + self.n_keys
        self.vocab_size = 1 + self.n_keys + self.n_values
        self.seq_len = 2 * self.n_pairs + 2

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        b = check_batch_size(self.name, batch_size)
        g = as_generator(generator)
        # A random permutation per row gives distinct keys without a Python loop.
        keys = torch.rand(b, self.n_keys, generator=g).argsort(dim=1)[:, : self.n_pairs] + self.KEY0
        values = torch.randint(self.VALUE0, self.VALUE0 + self.n_values, (b, self.n_pairs), generator=g)
        q = torch.randint(0, self.n_pairs, (b, 1), generator=g)
        pairs = torch.stack([keys, values], dim=2).reshape(b, 2 * self.n_pairs)
        query = torch.full((b, 1), self.QUERY, dtype=torch.long)
        seq = torch.cat([pairs, query, keys.gather(1, q), values.gather(1, q)], dim=1)
        inp, tgt = lm_pair(seq)
        loss_mask = torch.zeros_like(inp, dtype=torch.bool)
        loss_mask[:, -1] = True
        return Batch(inp, tgt, loss_mask, torch.ones_like(inp, dtype=torch.bool))
