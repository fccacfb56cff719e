"""Checkpointing: every ``train.ckpt_every`` steps and at the end (unless that step is saved
already), after the guard has read the steps' checks, so non-finite weights are never saved. Its
seconds run on the run's clock, not as training time."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .base import Clock, StepRecord


class Checkpointing:
    def __init__(self, every: int | None, save: Callable[[], Path | None], saved: int | None, *, clock: Clock,
                 sync: Callable[[], None]):
        """``save()``: write one now (every rank takes part); ``saved``: the step saved already, if any."""
        self.every, self.save, self.saved, self.clock, self.sync = every, save, saved, clock, sync

    def on_step(self, rec: StepRecord) -> None:
        if not self.every or rec.step % self.every:
            return
        self.sync()
        e0 = time.perf_counter()
        self.save()
        self.saved = rec.step
        self.clock.spend(time.perf_counter() - e0)

    def on_end(self, rec: StepRecord) -> None:
        if self.saved != rec.step:
            self.save()
            self.saved = rec.step
