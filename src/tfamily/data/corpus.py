"""``Corpus``: a tokenised corpus's splits as 1-D token tensors, whoever read them: the in-memory path
(``corpora.py``) or the memory maps of a prepared folder (``prepared.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True, eq=False)
class Corpus:
    """A tokenised corpus. Splits are 1-D views of one tensor (shape (n,))."""

    name: str
    vocab: object  # ByteVocab | CharVocab | TokenizerVocab
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    path: Path | None = None
    counts: tuple | None = None  # subword vocabularies: characters per token, per split (train, val, test)

    def split(self, which: str) -> torch.Tensor:
        """The split called `which`: 'train', 'val' (or 'valid'), 'test'."""
        table = {"train": self.train, "val": self.val, "valid": self.val, "test": self.test}
        if which not in table:
            raise ValueError(f"unknown split {which!r}; choose one of 'train', 'val', 'test'")
        return table[which]

    def chars(self, which: str) -> torch.Tensor | None:
        """Characters per token of split ``which`` (None: one per token, a byte or character vocabulary)."""
        self.split(which)
        if self.counts is None:
            return None
        return dict(zip(("train", "val", "test"), self.counts)).get("val" if which == "valid" else which)

    def __repr__(self) -> str:
        return (
            f"Corpus({self.name!r}, vocab={self.vocab!r}, train={len(self.train):,}, "
            f"val={len(self.val):,}, test={len(self.test):,})"
        )
