"""Evaluation: on the held-out data at the curve's points (``budget.Curve``) and once at the end,
each logged, kept in order (``evals``) and its rate given to the budget, which predicts the final
evaluation from it. Its seconds run on the run's clock, not as training time."""
from __future__ import annotations

import time
from collections.abc import Callable

from ..budget import Budget, Curve
from ..distributed import Dist
from ..metrics import Logger
from .base import Clock, StepRecord

_SHOWN = ("loss", "bpc", "ppl", "acc")


class Evaluation:
    def __init__(self, evaluate: Callable[[int | None], dict], curve: Curve, budget: Budget, *, evals: list,
                 log: Logger, clock: Clock, dist: Dist, sync: Callable[[], None]):
        """``evaluate(units)``: the model scored on ``units`` of held-out data (None: the final
        evaluation's); ``evals``: this session's evaluations, appended to."""
        self.evaluate, self.curve, self.budget, self.evals = evaluate, curve, budget, evals
        self.log, self.clock, self.dist, self.sync = log, clock, dist, sync

    def on_step(self, rec: StepRecord) -> None:
        if not self.curve.due(rec.step, rec.total):
            return
        self.sync()
        e0 = time.perf_counter()
        c = self.clock
        self.record(self.curve.eval_units(self.budget, rec.total, c.train_s / rec.ran, rec.units_per_s, self.dist))
        c.spend(time.perf_counter() - e0)

    def on_end(self, rec: StepRecord) -> None:
        last = self.evals[-1] if self.evals else None
        if last is None or last["step"] != rec.step or last["partial"]:
            e0 = time.perf_counter()
            self.record()
            self.clock.spend(time.perf_counter() - e0)  # the run's clock counts its final evaluation

    def record(self, units: int | None = None) -> None:
        """Evaluate on ``units`` (None: train.eval_tokens, a final evaluation) and log it."""
        e0 = time.perf_counter()
        e = self.evaluate(units)
        seconds = time.perf_counter() - e0
        self.budget.measured(e["tokens"], seconds)
        c = self.clock
        self.evals.append({"step": c.step, "train_s": c.train_s, **e, "eval_s": seconds,
                           "partial": units is not None and units < self.budget.eval_units})
        self.log.log_eval({"step": c.step, "tokens": c.tokens, **{k: e.get(k) for k in _SHOWN}},
                          extra={k: v for k, v in e.items() if k not in (*_SHOWN, "tokens")
                                 and isinstance(v, (int, float)) and not isinstance(v, bool)})
