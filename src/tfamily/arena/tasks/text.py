"""``text``: which corpus a window of ``length`` bytes comes from: Tiny Shakespeare, the King James Bible
or the GCIDE dictionary (3 classes, drawn uniformly). Windows start anywhere in the corpus's training
split; validation and test windows come from its held-out text (the first and second halves of its
validation and test splits). Byte-level like LRA's Text task: a member must compose characters into
words, names and layouts to tell the sources apart, and a short window may hold none of those."""
from __future__ import annotations

from .base import HELD_OUT, Declared, classify, generator, register

TEXT_CORPORA = ("tinyshakespeare", "kjv", "gcide")


def corpora(data_dir) -> tuple[list, list]:
    """(training split, (first, second) half of the held-out text) of each of ``TEXT_CORPORA``, as bytes;
    ``match`` reads the same."""
    import torch

    from ...data.corpora import load_corpus
    loaded = [load_corpus(name, data_dir, vocab="byte") for name in TEXT_CORPORA]
    held = [c.val if c.test.data_ptr() == c.val.data_ptr() else torch.cat([c.val, c.test]) for c in loaded]
    return [c.train for c in loaded], [(h[:len(h) // 2], h[len(h) // 2:]) for h in held]


def make(length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    import torch

    from ...train.tasks.classify import Examples
    train, halves = corpora(data_dir)
    every = torch.ones(1, length, dtype=torch.bool)

    def windows(texts: list[torch.Tensor], rows: int, g: torch.Generator) -> dict:
        label = torch.randint(len(texts), (rows,), generator=g)
        starts = [int(torch.randint(len(texts[c]) - length, (1,), generator=g)) for c in label.tolist()]
        x = torch.stack([texts[c][s:s + length].long() for c, s in zip(label.tolist(), starts)])
        return {"x": x, "y": label, "key_padding": every.expand(rows, -1)}

    def fixed(which: int) -> Examples:
        w = windows([h[which] for h in halves], eval_examples, generator(HELD_OUT + which + 1, 0))
        return Examples(w["x"], w["y"], w["key_padding"])

    return classify("text", ((lambda rows, g: windows(train, rows, g)), fixed(0), fixed(1), 256, len(TEXT_CORPORA)),
                    batch_size=batch_size, seed=seed)


TASK = register(Declared("text", 256, make))
