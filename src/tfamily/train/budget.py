"""The time budget: when to stop, and where the learning-rate schedule ends.

With ``train.time_budget`` the run stops when the budget is spent, keeping back the
predicted time of the final evaluation, and the cosine's end moves to the step where
the budget will run out (refit from the measured step rate after steps 1, 2, 5 and
every 10th), so the schedule decays fully whatever the machine's speed.
"""
from __future__ import annotations

from . import distributed


class Budget:
    def __init__(self, seconds: float | None, max_steps: int | None, eval_units: int):
        """``seconds``: the budget (None: none); ``eval_units``: units the final evaluation scores."""
        self.seconds, self.max_steps, self.eval_units = seconds, max_steps, eval_units

    def final_eval_s(self, units_per_s: float) -> float:
        """Predicted time of the final evaluation: a forward pass costs about a third of a
        training step per unit (Kaplan et al. 2020: 2N vs 6N FLOPs); 2.5x is the margin."""
        return self.eval_units / (2.5 * max(units_per_s, 1.0))  # ranks share both the eval and the throughput

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
        """The step where the budget runs out (same on all ranks), at least ``step + 1``."""
        rate = ran / max(seconds, 1e-9)
        est = distributed.mean([step + rate * max(0.0, self.left(elapsed, units_per_s))], dist)[0]
        total = int(min(est, self.max_steps) if self.max_steps else est)
        return max(total, step + 1)
