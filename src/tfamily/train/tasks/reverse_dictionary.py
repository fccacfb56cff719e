"""The GCIDE reverse dictionary (``data.task=reverse_dictionary``) as source/target pairs.

Source: a definition's characters; target: its headword between BOS and EOS, the two ids past
the character alphabet (``data/gcide.py`` parses the file, cleans the senses and splits by
headword). Training batch t is ``batch_size * world_size`` training pairs drawn uniformly with
replacement under generator (seed, t), rank r taking its slice, so the position is (seed, step)
as for the synthetic tasks. Evaluation walks ``data.eval_split`` ('val' = the valid split, or
'test') in file order. Batches are ``train.tasks.seq2seq``'s: ``{"src", "src_padding",
"tgt_in", "tgt_out", "tgt_padding", "loss_mask"}``, padding masks True on real tokens.

``data.task_params``: ``path`` (a GCIDE text file; default ``gcide.txt.gz`` in the data
directory), ``split_seed`` (0), and the parser's ``max_def_len`` (128), ``min_def_len`` (8),
``max_word_len`` (24), ``senses`` ('all' | 'first').
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from ...data.gcide import ALPHABET, Pair, load_reverse_dictionary
from ...data.vocab import CharVocab
from ...settings.run import DataConfig
from ..task import step_position
from .seq2seq import pairs_batch
from .synthetic import generator

NAME = "reverse_dictionary"
PARAMS = ("path", "split_seed", "max_def_len", "min_def_len", "max_word_len", "senses")


class ReverseDictionaryTask:
    """Definition -> headword pairs of the GCIDE dictionary for the encoder-decoder."""

    kind, unit, carries_state, name = "seq2seq", "tokens", False, NAME

    def __init__(self, cfg: DataConfig, batch_size: int, *, seed: int = 0, rank: int = 0, world_size: int = 1,
                 data_dir=None):
        params = dict(cfg.task_params)
        unknown = sorted(set(params) - set(PARAMS))
        if unknown:
            raise ValueError(f"{NAME}: unknown parameter(s) {unknown}; valid parameters are {list(PARAMS)}")
        self.data = load_reverse_dictionary(data_dir, **params)
        self.vocab = CharVocab(ALPHABET)
        self._index = {c: i for i, c in enumerate(self.vocab.chars)}
        self.bos, self.eos = self.vocab.size, self.vocab.size + 1
        self.vocab_size = self.vocab.size + 2
        self.eval_split = cfg.eval_split
        self.train_ids = self.encode(self.data.train)
        every = self.data.train + self.data.valid + self.data.test
        self.max_word_len = max(len(w) for _, w in every)
        self.seq_len = max(max(len(d) for d, _ in every), self.max_word_len + 1)
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.step = 0
        self._eval_cache = None

    def encode(self, pairs: list[Pair]) -> list[tuple[list[int], list[int]]]:
        """(definition, headword) strings -> (source ids, target ids)."""
        index = self._index  # one dict lookup per character: the vocabulary's array encode costs ~100 us a call
        return [([index[c] for c in d], [index[c] for c in w]) for d, w in pairs]

    def decode(self, ids: list[int]) -> str:
        """Target ids (no BOS) -> the headword, up to the first EOS."""
        ids = ids[:ids.index(self.eos)] if self.eos in ids else ids
        return self.vocab.decode([i for i in ids if i < self.vocab.size])

    def pairs(self, split: str) -> list[Pair]:
        """The (definition, headword) strings of ``split`` ('train', 'valid'/'val', 'test')."""
        return self.data.split(split)

    def batch(self, pairs: list[Pair]) -> dict:
        return pairs_batch(self.encode(pairs), self.bos, self.eos)

    def next(self) -> dict:
        g = generator(self.seed, self.step)
        idx = torch.randint(len(self.train_ids), (self.batch_size * self.world_size,), generator=g)
        rows = idx[self.rank * self.batch_size:(self.rank + 1) * self.batch_size].tolist()
        self.step += 1
        return pairs_batch([self.train_ids[i] for i in rows], self.bos, self.eos)

    def size(self, batch: dict) -> int:
        return batch["src"].numel() + batch["tgt_in"].numel()

    def carry(self, state) -> None:
        """Pairs are independent: nothing is carried."""

    def state_dict(self) -> dict:
        return step_position(NAME, self)

    def load_state_dict(self, state: dict) -> None:
        step_position(NAME, self, state)

    def _eval_ids(self, max_units: int | None) -> list[tuple[list[int], list[int]]]:
        """The evaluation split's pairs, in order, until their tokens reach ``max_units``."""
        if self._eval_cache is None:
            self._eval_cache = self.encode(self.data.split(self.eval_split))
        out, units = [], 0
        for s, y in self._eval_cache:
            if max_units is not None and units >= max_units:
                break
            out.append((s, y))
            units += len(s) + len(y) + 1
        return out

    def eval_size(self, max_units: int | None) -> int:
        return sum(len(s) + len(y) + 1 for s, y in self._eval_ids(max_units))

    def eval_metrics(self, loss: float) -> dict:
        return {}

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """This rank's rows (every world_size-th pair) of one ordered pass."""
        mine = self._eval_ids(max_units)[self.rank::self.world_size]
        rows = max(1, batch_size // self.world_size)
        for i in range(0, len(mine), rows):
            yield pairs_batch(mine[i:i + rows], self.bos, self.eos)
