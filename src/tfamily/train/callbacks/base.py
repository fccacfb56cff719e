"""What the training loop tells its callbacks, and when.

The loop (``loop.py``) runs steps; everything else a run does between them is a callback: the
non-finite guard, logging, evaluation, checkpointing, the time budget, the start line's measured
estimate and the result file (one module each here), then the callbacks a caller adds
(``Trainer(callbacks=[...])``, or ``installed`` around a command). A callback implements any of the
hooks below; each hook is a Protocol of its own, so the loop collects the callbacks of a hook once,
by what they declare (as ``models/hooks.py`` does for a model's parts).

Each step is handed over as a ``StepRecord``. With the checks kept on the device
(``train.check_every`` > 1, ``guard.py``) its loss and gradient norm are 0-d device tensors, read
back at the guard's next check; otherwise they are floats.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from torch import Tensor

STAGES = ("data", "build", "autotune", "save")  # ``SeesStages``, in the order a run reaches them


@dataclasses.dataclass
class Clock:
    """The run's counters, shared by the loop and the callbacks whose work runs on the run's clock:
    ``elapsed`` counts training, evaluations and checkpoints (a time budget spends it), ``train_s``
    this process's training alone (rates are per training second)."""

    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    train_s: float = 0.0

    @staticmethod
    def attribute(name: str, doc: str) -> property:
        """The counter ``name`` read and set as an attribute of the owner's ``clock`` (the ``Trainer``'s)."""
        return property(lambda o: getattr(o.clock, name), lambda o, v: setattr(o.clock, name, v), doc=doc)

    def spend(self, seconds: float, training: bool = False) -> None:
        self.elapsed += seconds
        if training:
            self.train_s += seconds


@dataclasses.dataclass
class StepRecord:
    """One training step (or, with ``ran == 0``, where a run starts)."""

    step: int                          # steps taken, this one included
    tokens: int                        # units trained on, this run (resumed runs included)
    ran: int                           # steps this process took
    total: int                         # the planned last step (the schedule's end; the budget moves it)
    lr: float = 0.0                    # the learning rate this step used
    loss: float | Tensor | None = None         # the mean loss over ranks
    grad_norm: float | Tensor | None = None    # the gradient norm before clipping
    units_per_s: float = 0.0           # this process's training rate, in the task's units
    elapsed_s: float = 0.0             # the run's clock: training, evaluations and checkpoints
    train_s: float = 0.0               # this process's training seconds
    report: dict = dataclasses.field(default_factory=dict)  # the task's own numbers (``task.Reports``)
    stopped: str | None = None         # on the last record: "max_steps" or "time_budget"

    def row(self) -> dict:
        """The row ``train.csv`` takes."""
        return {"step": self.step, "tokens": self.tokens, "loss": self.loss, "lr": self.lr,
                "grad_norm": self.grad_norm, "tokens_per_s": self.units_per_s, "elapsed_s": self.elapsed_s,
                **self.report}


@runtime_checkable
class SeesStages(Protocol):
    def on_stage(self, stage: str) -> None:
        """The run's start-up reached ``stage`` (one of ``STAGES``), the run directory locked."""


@runtime_checkable
class Stops(Protocol):
    def stop(self, last: StepRecord) -> str | None:
        """Before each step, ``last`` the step before: a reason to stop now, else None."""


@runtime_checkable
class SeesSteps(Protocol):
    def on_step(self, rec: StepRecord) -> None:
        """After each step, in the order the callbacks were given."""


@runtime_checkable
class SeesEnd(Protocol):
    def on_end(self, rec: StepRecord) -> None:
        """After the last step (``rec.stopped`` says why), before the result."""


@runtime_checkable
class SeesResult(Protocol):
    def on_result(self, result: dict) -> None:
        """The run's result, as ``Trainer.fit`` returns it."""


@runtime_checkable
class SeesSaves(Protocol):
    def on_save(self, step: int, phase: str) -> None:
        """A checkpoint write of ``step`` reached ``phase``: 'begin' (nothing written yet) or 'files'
        (its tensors written, ``meta.json`` not yet: until that, the checkpoint does not exist)."""


HOOKS = {"on_stage": SeesStages, "stop": Stops, "on_step": SeesSteps, "on_end": SeesEnd,
         "on_result": SeesResult, "on_save": SeesSaves}


class Callbacks:
    """Callbacks in order, each hook's collected once: ``calls.on_step(rec)`` calls every callback
    that has ``on_step``; ``calls.stop(rec)`` gives the first reason one of them returns."""

    def __init__(self, callbacks: list):
        self.all = list(callbacks)
        self._by_hook = {hook: [cb for cb in self.all if isinstance(cb, proto)] for hook, proto in HOOKS.items()}
        unused = [type(cb).__name__ for cb in self.all if not any(cb in cbs for cbs in self._by_hook.values())]
        if unused:
            raise TypeError(f"callbacks {unused} implement none of the hooks {sorted(HOOKS)}")

    def __iter__(self) -> Iterator:
        return iter(self.all)

    def on_stage(self, stage: str) -> None:
        for cb in self._by_hook["on_stage"]:
            cb.on_stage(stage)

    def stop(self, last: StepRecord) -> str | None:
        return next((why for cb in self._by_hook["stop"] if (why := cb.stop(last)) is not None), None)

    def on_step(self, rec: StepRecord) -> None:
        for cb in self._by_hook["on_step"]:
            cb.on_step(rec)

    def on_end(self, rec: StepRecord) -> None:
        for cb in self._by_hook["on_end"]:
            cb.on_end(rec)

    def on_result(self, result: dict) -> None:
        for cb in self._by_hook["on_result"]:
            cb.on_result(result)

    def on_save(self, step: int, phase: str) -> None:
        for cb in self._by_hook["on_save"]:
            cb.on_save(step, phase)


_installed: list = []


@contextlib.contextmanager
def installed(*callbacks) -> Iterator[None]:
    """Every ``Trainer`` made inside this block calls ``callbacks`` too, after its own: a way to watch a
    run that a command starts (``with installed(MyTracker()): cli.main(["train", ...])``)."""
    _installed.extend(callbacks)
    try:
        yield
    finally:
        for cb in callbacks:
            _installed.remove(cb)


def extra() -> list:
    """The callbacks ``installed`` adds now."""
    return list(_installed)
