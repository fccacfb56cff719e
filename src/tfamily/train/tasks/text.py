"""Text language modelling: ``{"x", "y"}`` next-token pairs from ``tfamily.data``'s loaders.

Random windows (any model), or contiguous streams for memory models: row r of batch
t+1 continues row r of batch t, so a carried state (Transformer-XL memory) sees
continuous text; it is reset when the stream wraps around. Resumable: the position is
a small JSON dict, and batch t depends only on (seed, t), so a resumed run sees
exactly the batches the uninterrupted run would have.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from ...data import EvalBatches, RandomWindows, StreamBatches, load_corpus
from ...data.subword import bits_per_char
from ...settings.run import DataConfig


class TextTask:
    """A corpus split into train / eval token tensors, batched without copying."""

    kind, unit = "text", "tokens"

    def __init__(self, cfg: DataConfig, batch_size: int, *, seed: int = 0, rank: int = 0, world_size: int = 1,
                 data_dir=None, vocab=None):
        """``vocab``: a vocabulary object (e.g. a checkpoint's) to use instead of ``cfg.vocab``."""
        corpus = load_corpus(cfg.corpus, data_dir, vocab=vocab if vocab is not None else cfg.vocab,
                             download=cfg.download)
        self.name, self.vocab, self.vocab_size = corpus.name, corpus.vocab, corpus.vocab.size
        self.seq_len, self.stream = cfg.seq_len, bool(cfg.stream)  # None: windows (the trainer asks the member first)
        self.carries_state = self.stream
        self.rank, self.world_size = rank, world_size
        self.eval_data = corpus.split(cfg.eval_split)
        # Tiny Shakespeare's convention (char-rnn, nanoGPT) has no test split: its "test" is the validation text
        self.split_note = (f"{corpus.name} has no test split; this is its validation split"
                           if cfg.eval_split == "test" and corpus.split("test") is corpus.split("val") else None)
        self.eval_chars = corpus.chars(cfg.eval_split)  # None: one character per token
        self._scored = (1, 1)  # (tokens, characters) of the last evaluation's targets
        if len(self.eval_data) < cfg.seq_len + 1:  # found now, not after training
            raise ValueError(f"the {cfg.eval_split} split of {corpus.name} has {len(self.eval_data)} tokens, fewer "
                             f"than data.seq_len + 1 = {cfg.seq_len + 1} that one evaluation window needs; lower "
                             f"data.seq_len or use a longer corpus")
        if self.stream:
            self.train = StreamBatches(corpus.train, cfg.seq_len, batch_size, rank=rank, world_size=world_size)
        else:
            self.train = RandomWindows(corpus.train, cfg.seq_len, batch_size, seed=seed, rank=rank,
                                       world_size=world_size)
        self._state_epoch = 0  # the stream epoch the carried state has seen

    @property
    def epoch(self) -> int:
        return self.train.epoch if self.stream else 0

    def next(self) -> dict:
        if not self.stream:
            x, y = next(self.train)
            return {"x": x, "y": y}
        s = self.train
        if s.position >= s.n_batches:
            s.position, s.epoch = 0, s.epoch + 1
        x, y = s.batch(s.position)
        s.position += 1
        return {"x": x, "y": y}

    def size(self, batch: dict) -> int:
        return batch["x"].numel()

    def carry(self, state) -> None:
        if self.epoch != self._state_epoch:  # the stream wrapped: the memory is of other text
            state.reset()
            self._state_epoch = self.epoch

    def state_dict(self) -> dict:
        return self.train.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.train.load_state_dict(state)
        self._state_epoch = self.epoch  # a checkpoint is written after carry() has caught up

    def eval_size(self, max_units: int | None) -> int:
        n = (len(self.eval_data) - 1) // self.seq_len * self.seq_len
        return n if max_units is None else min(n, max_units)

    def eval_metrics(self, loss: float) -> dict:
        # Total nats over the characters of the text scored. Character and byte vocabularies:
        # a token is a character (a byte: enwik8's convention), so this is nats per token / ln 2;
        # a subword token stands for several (data/subword.py).
        tokens, chars = self._scored
        return {"bpc": bits_per_char(loss * tokens, chars) if self.eval_chars is not None else loss / math.log(2)}

    def _count_scored(self, n_windows: int, rows: int | None = None) -> None:
        """(tokens, characters) of the targets the evaluation scores: windows 1..n*seq_len of the
        split, or of each of ``rows`` streams; every rank's, so the ratio is the whole pass's."""
        if self.eval_chars is None:
            return
        c, span = self.eval_chars, n_windows * self.seq_len
        if rows is None:
            self._scored = (span, int(c[1 : span + 1].sum()))
        else:
            length = len(c) // rows
            self._scored = (rows * span, int(c[: rows * length].reshape(rows, length)[:, 1 : span + 1].sum()))

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """Windows in order (ranks take every world_size-th batch), or contiguous streams
        when streaming (ranks take disjoint rows), so carried memory sees continuous text."""
        if self.stream:
            rows = max(1, min(batch_size // self.world_size, len(self.eval_data) //
                              (self.world_size * (self.seq_len + 1))))
            s = StreamBatches(self.eval_data, self.seq_len, rows, rank=self.rank, world_size=self.world_size)
            n = s.n_batches
            if max_units is not None:
                n = min(n, max(1, max_units // (rows * self.world_size * self.seq_len)))
            self._count_scored(n, rows * self.world_size)
            for t in range(n):
                x, y = s.batch(t)
                yield {"x": x, "y": y}
            return
        batches = EvalBatches(self.eval_data, self.seq_len, batch_size, max_tokens=max_units)
        self._count_scored(batches.n_tokens // self.seq_len)
        for i, (x, y) in enumerate(batches):
            if i % self.world_size == self.rank:
                yield {"x": x, "y": y}
