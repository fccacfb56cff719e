"""The budget: when to stop, where the learning-rate schedule ends, and when to evaluate.

With ``train.time_budget`` the run stops when the budget is spent, keeping back the
predicted time of the final evaluation (from the rate the run's evaluations measured, else
estimated from the training rate), and the cosine's end moves to the step where the budget
will run out (refit from the measured step rate after steps 1, 2, 5 and every 10th, its
evaluations and checkpoints included), so the schedule decays fully whatever the machine's speed.

``train.eval_every: auto`` gives a run about ``CURVE_POINTS`` evaluations whatever its budget
(steps, or the steps a time budget is predicted to last): one each time the run passes another
``1 / CURVE_POINTS`` of its steps, at a logged step. The ones before the last score fewer units,
so that together they take at most ``CURVE_SHARE`` of the training time; the final one scores
``train.eval_tokens``.
"""
from __future__ import annotations

from . import distributed

CURVE_POINTS = 20   # evaluations of a run with train.eval_every auto, the final one included
CURVE_SHARE = 0.10  # of the training time, for all the evaluations before the final one together
MARGIN = 1.1        # on a measured evaluation rate: the final evaluation's prediction errs long


class Budget:
    def __init__(self, seconds: float | None, max_steps: int | None, eval_units: int):
        """``seconds``: the budget (None: none); ``eval_units``: units the final evaluation scores."""
        self.seconds, self.max_steps, self.eval_units = seconds, max_steps, eval_units
        self.eval_rate: float | None = None  # units per second of this process's evaluations, measured

    def measured(self, units: float, seconds: float) -> None:
        """An evaluation scored ``units`` in ``seconds``: predict the next ones from that rate (the
        slowest seen: a small evaluation's fixed costs make it the cautious one)."""
        rate = units / max(seconds, 1e-9)
        self.eval_rate = rate if self.eval_rate is None else min(self.eval_rate, rate)

    def eval_s(self, units: float, units_per_s: float) -> float:
        """Predicted seconds of an evaluation of ``units``: from the measured rate when there is one,
        else a forward pass at about a third of a training step per unit (Kaplan et al. 2020: 2N vs
        6N FLOPs), with 2.5x as the margin."""
        if self.eval_rate is not None:
            return MARGIN * units / self.eval_rate
        return units / (2.5 * max(units_per_s, 1.0))  # ranks share both the eval and the throughput

    def final_eval_s(self, units_per_s: float) -> float:
        """Predicted time of the final evaluation."""
        return self.eval_s(self.eval_units, units_per_s)

    def left(self, elapsed: float, units_per_s: float) -> float:
        """Budget seconds left for training, keeping back the final evaluation."""
        return self.seconds - elapsed - self.final_eval_s(units_per_s)

    def spent(self, elapsed: float, ran: int, units_per_s: float, dist) -> bool:
        """Stop now? (Agreed over ranks.) Never before the first step of a (resumed) run."""
        return self.seconds is not None and distributed.any_rank(
            elapsed >= self.seconds or (ran > 0 and self.left(elapsed, units_per_s) <= 0), dist)

    @staticmethod
    def refit_now(ran: int) -> bool:
        return ran in (1, 2, 5) or ran % 10 == 0

    def horizon(self, step: int, ran: int, seconds: float, elapsed: float, units_per_s: float, dist) -> int:
        """The step where the budget runs out (same on all ranks), at least ``step + 1``; ``seconds``:
        the seconds the ``ran`` steps took (the run's clock, evaluations included)."""
        rate = ran / max(seconds, 1e-9)
        est = distributed.mean([step + rate * max(0.0, self.left(elapsed, units_per_s))], dist)[0]
        total = int(min(est, self.max_steps) if self.max_steps else est)
        return max(total, step + 1)


class Curve:
    """When the run evaluates before its end, and on how many units."""

    def __init__(self, every: int | str | None, log_every: int, final_units: int, min_units: int):
        """``every``: train.eval_every (steps, 'auto' or None); ``final_units``: what the final
        evaluation scores; ``min_units``: one evaluation batch."""
        self.every, self.log_every = every, log_every
        self.final_units, self.min_units = final_units, min(min_units, final_units)
        self.passed: int | None = None  # auto: the 1/CURVE_POINTS of the run passed at the last evaluation
        self.units: int | None = None   # auto: what the evaluations before the final one score

    def due(self, step: int, total: int) -> bool:
        """Evaluate after ``step`` of a run planned to end at ``total`` (agreed over ranks)?"""
        if self.every != "auto":
            return bool(self.every) and step % self.every == 0
        passed = CURVE_POINTS * step // max(total, 1)
        if self.passed is None:  # the first step of this process (a resumed run has passed some)
            self.passed = CURVE_POINTS * (step - 1) // max(total, 1)
        if step % self.log_every or step >= total or passed <= self.passed:
            return False
        self.passed = passed
        return True

    def eval_units(self, budget: Budget, total: int, step_s: float, units_per_s: float, dist) -> int | None:
        """Units the evaluation now scores: None (train.eval_tokens) for a fixed train.eval_every; for
        auto, its share of ``CURVE_SHARE`` of the run's predicted training seconds (``total`` steps of
        ``step_s``) at the evaluation rate, between one batch and the final one's. Decided at the first
        evaluation and only lowered after, so the curve's points score (nearly) the same held-out text."""
        if self.every != "auto":
            return None
        share = CURVE_SHARE * total * step_s / (CURVE_POINTS - 1)
        units = share * self.final_units / max(budget.eval_s(self.final_units, units_per_s), 1e-9)
        units = distributed.mean([units], dist)[0]  # the same on every rank: each scores its share
        self.units = int(max(self.min_units, min(units, self.final_units, self.units or self.final_units)))
        return self.units
