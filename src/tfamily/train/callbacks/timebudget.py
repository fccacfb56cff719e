"""The time budget (``budget.Budget``): stops a timed run when its budget is spent (keeping back the
final evaluation), and moves the schedule's end to the step where the budget will run out, refit from
the measured step rate after steps 1, 2, 5 and every 10th. First among the callbacks: the others see
the moved end (``StepRecord.total``)."""
from __future__ import annotations

from collections.abc import Callable

from ..budget import Budget
from ..distributed import Dist
from .base import Clock, StepRecord


class TimeBudget:
    def __init__(self, budget: Budget, set_total: Callable[[int], None], *, clock: Clock, dist: Dist):
        """``set_total``: move the learning-rate schedule's end. The clock as it stands now is the start."""
        self.budget, self.set_total, self.clock, self.dist = budget, set_total, clock, dist
        self.start_elapsed = clock.elapsed

    def stop(self, last: StepRecord) -> str | None:
        spent = self.budget.spent(self.clock.elapsed, last.ran, last.units_per_s, self.dist)
        return "time_budget" if spent else None

    def on_step(self, rec: StepRecord) -> None:
        if self.budget.seconds is None or not Budget.refit_now(rec.ran):
            return
        elapsed = self.clock.elapsed
        rec.total = self.budget.horizon(rec.step, rec.ran, elapsed - self.start_elapsed, elapsed, rec.units_per_s,
                                        self.dist)
        self.set_total(rec.total)
