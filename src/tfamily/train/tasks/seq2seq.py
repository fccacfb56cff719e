"""Sequence-to-sequence pairs for the encoder-decoder, made from the synthetic tasks.

A synthetic LM task scores one contiguous answer per row (the copy of ``w`` in
``w SEP w``, the reversed ``w``, the digits of ``a + b``). As a pair, the source is the
row's prompt (every token before the answer: ``w SEP``, ``a + b =``) and the target is
the answer between BOS and EOS, two ids past the task's vocabulary (Vaswani et al. 2017,
section 3: the decoder starts from a start symbol and emits until end of sequence).
Batch ``{"src", "src_padding", "tgt_in", "tgt_out", "tgt_padding", "loss_mask"}`` for
``objectives.Seq2Seq``; padding masks are True on real tokens. Span corruption and
real translation pairs are more tasks with the same output.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from ...settings.run import DataConfig
from .synthetic import SyntheticTask


def pairs_batch(pairs: list[tuple[list[int], list[int]]], bos: int, eos: int, pad: int = 0) -> dict:
    """(source ids, target ids) pairs -> a seq2seq batch: BOS + target in, target + EOS out."""
    b = len(pairs)
    m, t = max(len(s) for s, _ in pairs), max(len(y) for _, y in pairs) + 1
    src = torch.full((b, m), pad, dtype=torch.long)
    tgt_in, tgt_out = torch.full((b, t), pad, dtype=torch.long), torch.full((b, t), pad, dtype=torch.long)
    src_padding, tgt_padding = torch.zeros(b, m, dtype=torch.bool), torch.zeros(b, t, dtype=torch.bool)
    for i, (s, y) in enumerate(pairs):
        src[i, :len(s)], src_padding[i, :len(s)] = torch.tensor(s), True
        tgt_in[i, :len(y) + 1] = torch.tensor([bos] + y)
        tgt_out[i, :len(y) + 1] = torch.tensor(y + [eos])
        tgt_padding[i, :len(y) + 1] = True
    return {"src": src, "src_padding": src_padding, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_padding": tgt_padding, "loss_mask": tgt_padding.clone()}


def to_pair(batch: dict, bos: int, eos: int, pad: int = 0) -> dict:
    """An LM batch ``{"x", "y", "loss_mask"}`` whose scored positions are one contiguous
    run per row -> a source/target pair batch."""
    x, y, keep = batch["x"], batch["y"], batch["loss_mask"]
    b, n = x.shape
    ar = torch.arange(n, device=x.device)
    lengths = keep.sum(1)
    if bool((lengths == 0).any()):
        raise ValueError("a row scores no position, so it has no answer to translate to")
    first = torch.where(keep, ar, n).min(1).values
    last = torch.where(keep, ar, -1).max(1).values
    if bool((last - first + 1 != lengths).any()):
        raise ValueError("the scored positions of a row are not contiguous; a pair needs one answer per row")
    src_len = first + 1  # the prompt: inputs up to the one that predicts the first answer token
    s = int(src_len.max())
    src_padding = ar[:s] < src_len[:, None]
    src = torch.where(src_padding, x[:, :s], torch.full_like(x[:, :s], pad))
    t = int(lengths.max())
    k = torch.arange(t + 1, device=x.device)
    answer = y.gather(1, (first[:, None] + k[:t]).clamp(max=n - 1))
    real = k[None, :t] < lengths[:, None]
    answer = torch.where(real, answer, torch.full_like(answer, pad))
    tgt_padding = k[None] <= lengths[:, None]  # BOS + the answer, or the answer + EOS
    tgt_in = torch.cat([torch.full_like(answer[:, :1], bos), answer], 1).masked_fill(~tgt_padding, pad)
    tgt_out = torch.cat([answer, torch.full_like(answer[:, :1], pad)], 1)
    tgt_out = torch.where(k[None] == lengths[:, None], torch.full_like(tgt_out, eos), tgt_out)
    return {"src": src, "src_padding": src_padding, "tgt_in": tgt_in, "tgt_out": tgt_out,
            "tgt_padding": tgt_padding, "loss_mask": tgt_padding.clone()}


class PairTask:
    """A synthetic LM task (copy, reverse, addition, ...) served as pairs."""

    kind, unit, vocab, carries_state = "seq2seq", "tokens", None, False

    def __init__(self, cfg: DataConfig, batch_size: int, *, seed: int = 0, rank: int = 0, world_size: int = 1):
        self.lm = SyntheticTask(cfg, batch_size, seed=seed, rank=rank, world_size=world_size)
        if self.lm.kind != "lm":
            raise ValueError(f"data.task={cfg.task!r} is a {self.lm.kind} task; the encoder-decoder needs a task "
                             f"with an answer to emit (copy, reverse, addition)")
        self.name = self.lm.name
        self.bos, self.eos = self.lm.vocab_size, self.lm.vocab_size + 1
        self.vocab_size, self.seq_len = self.lm.vocab_size + 2, self.lm.seq_len + 1

    def _pair(self, batch: dict) -> dict:
        return to_pair(batch, self.bos, self.eos)

    def next(self) -> dict:
        return self._pair(self.lm.next())

    def size(self, batch: dict) -> int:
        return batch["src"].numel() + batch["tgt_in"].numel()

    def carry(self, state) -> None:
        """Pairs are independent: nothing is carried."""

    def state_dict(self) -> dict:
        return self.lm.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.lm.load_state_dict(state)

    def eval_size(self, max_units: int | None) -> int:
        return self.lm.eval_size(max_units)

    def eval_metrics(self, loss: float) -> dict:
        return {}

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        for batch in self.lm.eval_batches(max_units, batch_size):
            yield self._pair(batch)
