"""The arena's tasks: offline classification problems at a length the user picks.

Each task is a ``train.tasks.classify.ClassifyTask``: training batches drawn from (seed, step), and
validation and test sets fixed for every seed and member (their own generators, or their own part
of the data). ``--length`` sets each task's sequence length:

* ``listops`` (Tay et al. 2021, section 3.1; the generator of ``data/synthetic/listops.py`` with
  LRA's grammar): the value 0-9 of a nested MAX/MIN/MED/SM expression, right-padded to ``length``
  tokens, with LRA's length ratio (its expressions have 500 to 2000 tokens: here ``length // 4`` to
  ``length``). Long-range: an operator's value depends on arguments that may be hundreds of tokens
  away, closed by a bracket at the end.
* ``mnist``: the digit of an MNIST image read as a sequence of pixels in raster order (LRA's Image
  task reads CIFAR-10 the same way), the image averaged down to ``length`` x ``length`` (a divisor
  of 28: 28, 14, 7 or 4; the sequence has ``length ** 2`` pixels of 256 grey levels). The shipped
  10,000-image set is split in file order: 8,000 train, 1,000 validation (the next), 1,000 test
  (the last, as ``load_mnist_t10k`` holds out). Long-range: a stroke's pixels in neighbouring rows
  are ``length`` positions apart.
* ``text``: which corpus a window of ``length`` bytes comes from: Tiny Shakespeare, the King James
  Bible or the GCIDE dictionary (3 classes, drawn uniformly). Windows start anywhere in the corpus's
  training split; validation and test windows come from its held-out text (the first and second
  halves of its validation and test splits). Byte-level like LRA's Text task: a member must compose
  characters into words, names and layouts to tell the sources apart, and a short window may hold
  none of those.

* ``pathfinder`` (Linsley et al. 2018; LRA section 3.5): whether two dots of a ``length`` x
  ``length`` image (16 or 32, any side >= 8) lie on one path, among distractor paths
  (``data/synthetic/pathfinder.py``), read in raster order (``length ** 2`` tokens: background,
  path, dot), balanced. Long-range: the dots are a path apart, and a path's pixels in successive
  rows are ``length`` positions apart.
* ``match``: whether two windows of ``length`` bytes come from the same document (LRA's Retrieval,
  section 3.3, matches documents by citation; we have no citations, so a document is a span of
  ``4 * length`` bytes of one corpus). Each row is a pair; both windows come from one corpus, from
  the same document (label 1) or from two documents at least a document apart (label 0), drawn
  half and half, from the training split (held-out sets: the halves of the held-out text as for
  ``text``). Corpus style cannot tell them apart; the shared names, speakers, verses and headwords of
  a document can, wherever they sit in the windows. A ``dual_encoder`` model reads it: each window
  is encoded alone by one shared encoder (``models/dual_encoder.py``).
* ``lm``: byte-level language modelling of GCIDE at a context of ``length`` bytes (default 4,096),
  bits per byte on held-out windows (lower is better), every member its causal decoder (``lm.py``).
"""
from __future__ import annotations

import difflib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..numbers import check_int
from ..train.tasks.classify import ClassifyTask, Examples, generator

DEFAULT_LENGTHS = {"listops": 256, "mnist": 14, "text": 256, "pathfinder": 16, "match": 256, "lm": 4096}
PAIRED = ("match",)  # tasks whose rows are pairs: a dual encoder reads them
LANGUAGE = ("lm",)   # tasks scored in bits per byte (lower is better), every member its causal decoder
HELD_OUT = 1 << 62  # held-out sets use seeds no run uses


def check_name(name: str) -> str:
    if name not in DEFAULT_LENGTHS:
        close = difflib.get_close_matches(str(name), DEFAULT_LENGTHS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown arena task {name!r}; {hint}tasks: {', '.join(DEFAULT_LENGTHS)}")
    return name


def check_length(name: str, length) -> int:
    """A task's ``--length``: an integer >= 2; for mnist also a divisor of 28 (the image side)."""
    length = check_int(f"--length {name}", length, 2)
    if name == "mnist" and 28 % length:
        raise ValueError(f"--length mnist={length} must divide 28 (the image side): 28, 14, 7 or 4")
    if name == "pathfinder" and length < 8:
        raise ValueError(f"--length pathfinder={length} is the image side: give at least 8, e.g. 16 or 32")
    return length


def seq_len(name: str, length: int) -> int:
    """The input length of task ``name`` at ``length`` (images: the side, so side ** 2 pixels)."""
    return length ** 2 if name in ("mnist", "pathfinder") else length


def _listops(length: int, n_eval: int, data_dir) -> tuple:
    from ..data.synthetic.listops import ListOpsTask
    task = ListOpsTask(min_length=max(1, length // 4), max_length=length)

    def draw(rows: int, g: torch.Generator) -> dict:
        b = task.sample(rows, g)
        return {"x": b.input, "y": b.target, "key_padding": b.valid}

    held = [draw(n_eval, generator(HELD_OUT + i, 0)) for i in (1, 2)]
    return draw, *(Examples(h["x"], h["y"], h["key_padding"]) for h in held), task.vocab_size, task.n_classes


def _mnist(side: int, n_eval: int, data_dir) -> tuple:
    from ..data.mnist import load_mnist_t10k
    split = load_mnist_t10k(data_dir)

    def pixels(images) -> torch.Tensor:
        x = torch.from_numpy(images).float()[:, None]
        x = F.avg_pool2d(x, 28 // side) if side < 28 else x
        return x.round().clamp(0, 255).long().flatten(1)

    x, y = pixels(split.train_images), torch.from_numpy(split.train_labels).long()
    n_train = len(y) - 1000
    x_test, y_test = pixels(split.test_images), torch.from_numpy(split.test_labels).long()
    every = torch.ones_like(x[:1], dtype=torch.bool)

    def fixed(xs, ys) -> Examples:
        xs, ys = xs[:n_eval], ys[:n_eval]
        return Examples(xs, ys, every.expand(len(ys), -1))

    def draw(rows: int, g: torch.Generator) -> dict:
        i = torch.randint(n_train, (rows,), generator=g)
        return {"x": x[i], "y": y[i], "key_padding": every.expand(rows, -1)}

    return draw, fixed(x[n_train:], y[n_train:]), fixed(x_test, y_test), 256, 10


TEXT_CORPORA = ("tinyshakespeare", "kjv", "gcide")


def _text(length: int, n_eval: int, data_dir) -> tuple:
    from ..data.corpora import load_corpus
    corpora = [load_corpus(name, data_dir, vocab="byte") for name in TEXT_CORPORA]
    held = [c.val if c.test.data_ptr() == c.val.data_ptr() else torch.cat([c.val, c.test]) for c in corpora]
    halves = [(h[:len(h) // 2], h[len(h) // 2:]) for h in held]
    every = torch.ones(1, length, dtype=torch.bool)

    def windows(texts: list[torch.Tensor], rows: int, g: torch.Generator) -> dict:
        label = torch.randint(len(texts), (rows,), generator=g)
        starts = [int(torch.randint(len(texts[c]) - length, (1,), generator=g)) for c in label.tolist()]
        x = torch.stack([texts[c][s:s + length].long() for c, s in zip(label.tolist(), starts)])
        return {"x": x, "y": label, "key_padding": every.expand(rows, -1)}

    def fixed(which: int) -> Examples:
        w = windows([h[which] for h in halves], n_eval, generator(HELD_OUT + which + 1, 0))
        return Examples(w["x"], w["y"], w["key_padding"])

    train = [c.train for c in corpora]
    return (lambda rows, g: windows(train, rows, g)), fixed(0), fixed(1), 256, len(TEXT_CORPORA)


def _pathfinder(side: int, n_eval: int, data_dir) -> tuple:
    from ..data.synthetic.pathfinder import Pathfinder
    task = Pathfinder(side)
    every = torch.ones(1, side * side, dtype=torch.bool)

    def draw(rows: int, g: torch.Generator) -> dict:
        x, y = task.sample(rows, g)
        return {"x": x, "y": y, "key_padding": every.expand(rows, -1)}

    held = [draw(n_eval, generator(HELD_OUT + i, 0)) for i in (1, 2)]
    return draw, *(Examples(h["x"], h["y"], h["key_padding"]) for h in held), task.vocab_size, task.n_classes


def _match(length: int, n_eval: int, data_dir) -> tuple:
    from ..data.corpora import load_corpus
    corpora = [load_corpus(name, data_dir, vocab="byte") for name in TEXT_CORPORA]
    held = [c.val if c.test.data_ptr() == c.val.data_ptr() else torch.cat([c.val, c.test]) for c in corpora]
    halves = [(h[:len(h) // 2], h[len(h) // 2:]) for h in held]
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
        w = pairs([h[which] for h in halves], n_eval, generator(HELD_OUT + which + 1, 0))
        return Examples(w["x"], w["y"], w["key_padding"])

    train = [c.train for c in corpora]
    return (lambda rows, g: pairs(train, rows, g)), fixed(0), fixed(1), 256, 2


MAKERS: dict[str, Callable] = {"listops": _listops, "mnist": _mnist, "text": _text, "pathfinder": _pathfinder,
                               "match": _match}


def metric(name: str) -> str:
    """What a task's leaderboard reports: ``acc`` (test accuracy, higher is better) or ``bpc``
    (test bits per byte, lower is better)."""
    return "bpc" if name in LANGUAGE else "acc"


def make(name: str, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    """The task ``name`` at ``length`` (see the module docstring) with ``batch_size`` rows a step:
    a ``ClassifyTask``, or for ``lm`` a ``lm.ByteLMTask``."""
    check_length(check_name(name), length)
    if name in LANGUAGE:
        from .lm import ByteLMTask
        return ByteLMTask(length, batch_size=batch_size, seed=seed, eval_examples=eval_examples, data_dir=data_dir)
    draw, val, test, vocab_size, n_classes = MAKERS[name](length, eval_examples, data_dir)
    return ClassifyTask(name, draw, val, test, vocab_size=vocab_size, n_classes=n_classes,
                        batch_size=batch_size, seed=seed)


def majority(task) -> float | None:
    """The test accuracy of always answering the validation set's most frequent class (the
    leaderboard's majority-class line); None for a language task."""
    if not isinstance(task, ClassifyTask):
        return None
    common = int(torch.bincount(task.val.y.flatten()).argmax())
    return float((task.test.y == common).float().mean())


def first_batch(task) -> dict:
    """The task's first training batch at its seed, without moving its position (what FLOPs and
    speed are measured on)."""
    if isinstance(task, ClassifyTask):
        return task.draw(task.batch_size, generator(task.seed, 0))
    return task.peek()
