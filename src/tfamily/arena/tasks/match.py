"""``match``: whether two windows of ``length`` bytes come from the same document (LRA's Retrieval,
section 3.3, matches documents by citation; we have no citations, so a document is a span of
``4 * length`` bytes of one corpus). Each row is a pair; both windows come from one corpus, from the same
document (label 1) or from two documents at least a document apart (label 0), drawn half and half,
from the training split (held-out sets: the halves of the held-out text as for ``text``). Corpus style
cannot tell them apart; the shared names, speakers, verses and headwords of a document can, wherever
they sit in the windows. A ``dual_encoder`` model reads it: each window is encoded alone by one shared
encoder (``models/dual_encoder.py``)."""
from __future__ import annotations

from .base import HELD_OUT, Declared, classify, generator, register
from .text import TEXT_CORPORA, corpora


def make(length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    import torch

    from ...train.tasks.classify import Examples
    train, halves = corpora(data_dir)
    doc = 4 * length
    every = torch.ones(1, 2, length, dtype=torch.bool)

    def window(text: torch.Tensor, d: int, g: torch.Generator) -> torch.Tensor:
        s = d * doc + int(torch.randint(doc - length + 1, (1,), generator=g))
        return text[s:s + length].long()

    def pairs(texts: list[torch.Tensor], rows: int, g: torch.Generator) -> dict:
        label = torch.randint(2, (rows,), generator=g)
        which = torch.randint(len(texts), (rows,), generator=g)
        x = []
        for c, same in zip(which.tolist(), label.tolist()):
            n_docs = len(texts[c]) // doc
            if n_docs < 4:
                raise ValueError(f"--length match={length}: {TEXT_CORPORA[c]}'s held-out half has {n_docs} "
                                 f"documents of {doc} bytes, fewer than 4; lower --length match")
            a = int(torch.randint(n_docs, (1,), generator=g))
            b = a if same else (a + 2 + int(torch.randint(n_docs - 3, (1,), generator=g))) % n_docs
            x.append(torch.stack([window(texts[c], a, g), window(texts[c], b, g)]))
        return {"x": torch.stack(x), "y": label, "key_padding": every.expand(rows, -1, -1)}

    def fixed(which: int) -> Examples:
        w = pairs([h[which] for h in halves], eval_examples, generator(HELD_OUT + which + 1, 0))
        return Examples(w["x"], w["y"], w["key_padding"])

    return classify("match", ((lambda rows, g: pairs(train, rows, g)), fixed(0), fixed(1), 256, 2),
                    batch_size=batch_size, seed=seed)


TASK = register(Declared("match", 256, make, paired=True))
