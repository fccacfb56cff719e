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

Pathfinder and byte-level document matching are not here yet.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..numbers import check_int
from ..train.tasks.classify import ClassifyTask, Examples, generator

DEFAULT_LENGTHS = {"listops": 256, "mnist": 14, "text": 256}
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
    return length


def seq_len(name: str, length: int) -> int:
    """The input length of task ``name`` at ``length`` (mnist: the side, so side ** 2 pixels)."""
    return length ** 2 if name == "mnist" else length


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


MAKERS: dict[str, Callable] = {"listops": _listops, "mnist": _mnist, "text": _text}


def make(name: str, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None) -> ClassifyTask:
    """The task ``name`` at ``length`` (see the module docstring) with ``batch_size`` rows a step."""
    check_length(check_name(name), length)
    draw, val, test, vocab_size, n_classes = MAKERS[name](length, eval_examples, data_dir)
    return ClassifyTask(name, draw, val, test, vocab_size=vocab_size, n_classes=n_classes,
                        batch_size=batch_size, seed=seed)
