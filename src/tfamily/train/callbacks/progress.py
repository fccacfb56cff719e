"""Logging: the progress bar (its total follows the budget's moves), and without a bar (a log file, a
pipe) one line every ``NOTE_S`` seconds, so a long run says how it goes."""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ..metrics import Logger
from .base import StepRecord

NOTE_S = 30.0


class Progress:
    def __init__(self, log: Logger, unit: str, total: int, *, recent: deque, sync: Callable[[], None]):
        """``unit``: the task's; ``total``: the planned last step; ``recent``: the losses whose mean is
        the train loss; ``sync``: read the steps' checks first (``NonFiniteGuard.sync``)."""
        self.log, self.unit, self.total, self.recent, self.sync = log, unit, total, recent, sync
        self.speed = "tok_s" if unit == "tokens" else f"{unit}/s"
        self.last_note = time.perf_counter()

    def on_step(self, rec: StepRecord) -> None:
        if rec.total != self.total:
            self.total = rec.total
            self.log.set_total(rec.total)
        note = (self.log.bar is None or self.log.bar.disable) and time.perf_counter() - self.last_note > NOTE_S
        if note:
            self.sync()
        self.log.step(**({"loss": self.recent[-1]} if self.recent else {}), **{self.speed: round(rec.units_per_s)},
                      **{k: v for k, v in rec.report.items() if v is not None})
        if note:
            self.last_note = time.perf_counter()
            loss = sum(self.recent) / len(self.recent)
            self.log.message(f"step {rec.step}: loss {loss:.4f}, {rec.units_per_s:.0f} {self.unit}/s, "
                             f"{rec.elapsed_s:.0f} s")
