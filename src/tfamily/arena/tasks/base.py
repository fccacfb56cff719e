"""What the arena reads of a task (``ArenaTask``) and the declaration that provides it (``Declared``).

A task is one declaration in its own file of this folder: its name, default ``--length``, kind
(classification, scored in test accuracy; language modelling, in bits per byte), whether its rows
are pairs, how ``--length`` becomes a sequence length, the checks ``--length`` must pass, and its
maker. ``register`` puts it in ``registry.ARENA_TASKS``; the CLI's names, help lines and checks,
the grid's model kind and the leaderboard's metric are read from there. Importing a declaration
imports no torch (``tfamily arena --help`` lists the tasks): makers import it when they run.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ... import registry
from ...base.numbers import check_int

HELD_OUT = 1 << 62  # held-out sets use seeds no run uses

# A check of ``--length NAME=N``: None when N is fine, else the rest of the refusal after "--length NAME=N ".
LengthCheck = Callable[[int], "str | None"]


class ArenaTask(Protocol):
    """One arena task: ``registry.ARENA_TASKS[name]`` is its ``make``; ``entry(name).info["task"]`` this."""

    name: str
    length: int      # the default --length
    metric: str      # "acc" (test accuracy, higher is better) or "bpc" (test bits per byte, lower is better)
    paired: bool     # rows are pairs (b, 2, n): a dual encoder reads them

    def check_length(self, length: Any) -> int:
        """``--length NAME=length`` checked: an integer the task can run at, or a one-line ValueError."""

    def seq_len(self, length: int) -> int:
        """The input length at ``length`` (an image task's length is the side: side ** 2 pixels)."""

    def make(self, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
        """The loop's ``Task`` (``train/task.py``) at ``length``, with fixed validation and test sets."""


@dataclass(frozen=True)
class Declared:
    """An arena task as one declaration. ``maker(length, *, batch_size, seed, eval_examples, data_dir)``
    returns the loop's ``Task``: a ``ClassifyTask`` (``classify`` builds one from a draw function and
    the fixed sets), or for a language task (``metric="bpc"``) a task with ``val`` / ``test`` held-out
    windows and ``peek()``. ``--length`` is an integer >= ``minimum`` passing each of ``checks``;
    ``image``: it is the image side, and the sequence has side ** 2 tokens."""

    name: str
    length: int
    maker: Callable[..., Any]
    metric: str = "acc"
    paired: bool = False
    minimum: int = 2
    checks: tuple[LengthCheck, ...] = ()
    image: bool = False

    def __post_init__(self):
        if self.metric not in ("acc", "bpc"):
            raise ValueError(f"arena task {self.name}: metric must be 'acc' or 'bpc', got {self.metric!r}")

    def check_length(self, length: Any) -> int:
        length = check_int(f"--length {self.name}", length, self.minimum)
        for check in self.checks:
            wrong = check(length)
            if wrong:
                raise ValueError(f"--length {self.name}={length} {wrong}")
        return length

    def seq_len(self, length: int) -> int:
        return length ** 2 if self.image else length

    def make(self, length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
        return self.maker(length, batch_size=batch_size, seed=seed, eval_examples=eval_examples, data_dir=data_dir)


def classify(name: str, parts: tuple, *, batch_size: int, seed: int):
    """A ``ClassifyTask`` from a classification maker's ``(draw, val, test, vocab_size, n_classes)``:
    ``draw(rows, generator)`` a training batch (``train/tasks/classify.py``), ``val`` and ``test`` its
    fixed ``Examples``."""
    from ...train.tasks.classify import ClassifyTask
    draw, val, test, vocab_size, n_classes = parts
    return ClassifyTask(name, draw, val, test, vocab_size=vocab_size, n_classes=n_classes, batch_size=batch_size,
                        seed=seed)


def register(task: ArenaTask) -> ArenaTask:
    """Make ``task`` an arena task: ``--tasks``, ``--length`` and the leaderboard read it from here."""
    if not isinstance(task.name, str) or not task.name:
        raise TypeError(f"an arena task needs a name, got {task.name!r}")
    registry.ARENA_TASKS.register(task.name, task.make, task=task)
    return task


def generator(seed: int, index: int):
    """``train.tasks.classify.generator``, imported when a maker runs (declarations import no torch)."""
    from ...train.tasks.classify import generator as make
    return make(seed, index)
