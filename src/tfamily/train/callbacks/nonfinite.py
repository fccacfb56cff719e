"""The non-finite guard's reads: the steps since the last read are checked, then their losses join
the recent ones (``train_loss`` is their mean) and every ``log_every``-th row goes to ``train.csv``.

Checked every step (a CPU, fp16, several ranks) the step itself stops a non-finite run
(``Trainer.train_step``) and a read here only writes the row. With the checks kept on the device
(``guard.py``) a read is one sync, every ``check_every`` steps and wherever a callback is about to read
the step's values or the model (``sync``: a log line, an evaluation, a checkpoint): a failed step
stops the run there, as the step itself would have (``stop``), keeping the rows before it.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import torch
from torch import Tensor

from ..guard import Guard, failure
from ..metrics import Logger
from .base import Clock, StepRecord


class NonFiniteGuard:
    def __init__(self, guard: Guard | None, check_every: int, log_every: int, *, recent: deque, log: Logger,
                 clock: Clock, stop: Callable[[str, int, bool], None]):
        """``guard``: the checks on the device (None: checked every step); ``recent``: the losses that
        ``train_loss`` averages; ``stop(what, step, after)``: raise ``NonFiniteLoss``."""
        self.guard, self.check_every, self.log_every = guard, check_every, log_every
        self.recent, self.log, self.clock, self.stop_run = recent, log, clock, stop
        self.pending: list[dict] = []  # steps taken since the last read, their values on the device

    def on_step(self, rec: StepRecord) -> None:
        self.pending.append(rec.row())
        if self.guard is None or rec.step % self.check_every == 0:
            self.sync()

    def on_end(self, rec: StepRecord) -> None:
        self.sync()

    def check(self) -> None:
        """Read the device checks of the steps since the last read (one sync) and stop at the first
        that failed, as ``Trainer.train_step`` would have there."""
        failed = failure(self.guard)
        if failed is not None:
            self.pending = [p for p in self.pending if p["step"] < failed[1]]
            self.stop_run(*failed)

    def sync(self) -> None:
        """The steps since the last read: checked, their losses into the recent ones, their rows logged
        (those before a failed step too). Its seconds are training time: with the checks on the device,
        the read waits for the queued steps."""
        if not self.pending:
            return
        t0 = time.perf_counter()
        try:
            self.check()
        finally:
            rows, self.pending = self.pending, []
            values = [(r["loss"], r["grad_norm"]) for r in rows]
            if values and isinstance(values[0][0], Tensor):  # one read for all of them
                values = torch.stack([torch.stack([a.float(), b.float()]) for a, b in values]).tolist()
            for row, (loss, norm) in zip(rows, values):
                row["loss"], row["grad_norm"] = loss, norm
                self.recent.append(loss)
                if row["step"] % self.log_every == 0:
                    self.log.log_train(row)
            self.clock.spend(time.perf_counter() - t0, training=True)
