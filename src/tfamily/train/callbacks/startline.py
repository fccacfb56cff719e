"""The start line's estimate, measured: after ``startup.TELL_STEPS`` steps (or ``TELL_S`` seconds
of training, if sooner) one more line gives the time per 100 steps and to the end as measured
(the start line itself is printed before the first step, ``startup.first_line``)."""
from __future__ import annotations

from collections.abc import Callable

from .. import startup
from ..metrics import Logger
from .base import StepRecord


class MeasuredLine:
    def __init__(self, log: Logger, to_end: Callable[[float], str]):
        """``to_end(step_s)``: the time to the run's end at ``step_s`` a step (``startup.to_end``)."""
        self.log, self.to_end, self.told = log, to_end, False

    def on_step(self, rec: StepRecord) -> None:
        if not self.told and startup.tell(rec.ran, rec.train_s):
            self.told = True
            self.log.message(startup.measured_line(rec.ran, rec.train_s, self.to_end))
