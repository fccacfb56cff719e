"""The arena's tasks: offline problems at a length the user picks, one declaration per task.

Each file of this folder declares one task (``base.Declared``, registered in
``registry.ARENA_TASKS``): its default ``--length``, its kind (classification, scored in test
accuracy; ``lm``, in test bits per byte), whether its rows are pairs (a dual encoder reads them), how
``--length`` becomes a sequence length and what it must pass, and its maker, whose training batches
are drawn from (seed, step) and whose validation and test sets are fixed for every seed and member
(their own generators, or their own part of the data). The tasks, in the order ``--tasks`` lists them:

* ``listops.py``: the value of a nested MAX/MIN/MED/SM expression (LRA's ListOps);
* ``mnist.py``: the digit of an MNIST image read pixel by pixel (``--length`` is the image side);
* ``text.py``: which of three corpora a window of bytes comes from (LRA's Text, byte-level);
* ``pathfinder.py``: whether two dots lie on one path (LRA's Pathfinder; the image side);
* ``match.py``: whether two windows come from one document (LRA's Retrieval), read by a dual encoder;
* ``lm.py``: byte-level language modelling of GCIDE at a long context, every member its causal decoder.

To add a task, write ``NAME.py`` here ending in ``TASK = register(Declared(NAME, length, make, ...))``
and import it below: the CLI, the grid and the leaderboard read everything else from the declaration.
This module imports no torch (``tfamily arena --help`` lists the tasks); the makers do when they run.
"""
from __future__ import annotations

import difflib

from ... import registry
from . import listops, mnist, text, pathfinder, match, lm  # noqa: F401,E401  (registration, in listing order)
from .base import HELD_OUT, ArenaTask, Declared, register  # noqa: F401  (the extension point)
from .text import TEXT_CORPORA  # noqa: F401


def names() -> list[str]:
    """The arena's tasks in the order they were declared (``--tasks`` lists them so)."""
    return registry.ARENA_TASKS.in_order()


def check_name(name: str) -> str:
    if name not in registry.ARENA_TASKS:
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown arena task {name!r}; {hint}tasks: {', '.join(names())}")
    return name


def get(name: str) -> ArenaTask:
    """The declaration of task ``name`` (refused with the valid names when there is none)."""
    return registry.ARENA_TASKS.entry(check_name(name)).info["task"]


def check_length(name: str, length) -> int:
    """A task's ``--length``: an integer >= 2 passing the task's own checks (mnist: a divisor of 28)."""
    return get(name).check_length(length)


def seq_len(name: str, length: int) -> int:
    """The input length of task ``name`` at ``length`` (images: the side, so side ** 2 pixels)."""
    return get(name).seq_len(length)


def metric(name: str) -> str:
    """What a task's leaderboard reports: ``acc`` (test accuracy, higher is better) or ``bpc``
    (test bits per byte, lower is better)."""
    return get(name).metric


def make(name: str, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    """The task ``name`` at ``length`` with ``batch_size`` rows a step: a ``ClassifyTask``, or for
    ``lm`` a ``lm.ByteLMTask``."""
    task = get(name)
    task.check_length(length)
    return task.make(length, batch_size=batch_size, seed=seed, eval_examples=eval_examples, data_dir=data_dir)


def majority(task) -> float | None:
    """The test accuracy of always answering the validation set's most frequent class (the
    leaderboard's majority-class line); None for a language task."""
    import torch

    from ...train.tasks.classify import ClassifyTask
    if not isinstance(task, ClassifyTask):
        return None
    common = int(torch.bincount(task.val.y.flatten()).argmax())
    return float((task.test.y == common).float().mean())


def first_batch(task) -> dict:
    """The task's first training batch at its seed, without moving its position (what FLOPs and
    speed are measured on)."""
    from ...train.tasks.classify import ClassifyTask, generator
    if isinstance(task, ClassifyTask):
        return task.draw(task.batch_size, generator(task.seed, 0))
    return task.peek()


def __getattr__(name: str):
    # The tables this module once kept by hand, read from the declarations (for code that imports them).
    if name == "DEFAULT_LENGTHS":
        return {n: get(n).length for n in names()}
    if name == "PAIRED":
        return tuple(n for n in names() if get(n).paired)
    if name == "LANGUAGE":
        return tuple(n for n in names() if get(n).metric == "bpc")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
