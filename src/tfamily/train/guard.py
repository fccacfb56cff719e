"""The trainer's non-finite checks: a NaN or infinite loss, gradient norm or weight stops the run
naming the step (``stop``), before the optimiser touches the weights or before anything saves them;
fp16's skipped steps (``skipped_step``); and the checks kept on the device, read every
``train.check_every`` steps (the rest of this module).

Reading the loss, the gradient norm and a weights-finite flag back to the host every step makes a
GPU wait for the host three times a step, idle while the next kernels are launched. Here the three
checks are tensors on the device: the first step that fails is recorded (its number, which check
and the values), a sticky ``bad`` flag makes the optimiser skip that step and every later one on the
device (fused AdamW's ``found_inf``; ``Muon`` masks its update), and the trainer reads it all in one
sync at its next check point (a log, evaluation or checkpoint step, or the end). The run then stops
as it would have at the bad step, with the weights as they were before it (or, for weights that an
update made non-finite, before anything saved them), and names that step.

The functions taking ``tr`` are the ``Trainer``'s (``loop.py``) steps on this path.
"""
from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from . import distributed

LOSS, NORM, WEIGHTS = 0, 1, 2


class NonFiniteLoss(RuntimeError):
    """The loss (or gradient norm) became NaN or infinite; the run stopped before updating."""


def stop(tr, what: str, step: int, after: bool = False) -> None:
    """Raise ``NonFiniteLoss`` for the trainer ``tr``: ``what`` failed at ``step``, ``after`` the update."""
    tr.optimizer.zero_grad(set_to_none=True)
    last = f"the last good checkpoint is {tr.last_ckpt}" if tr.last_ckpt else "no checkpoint was written yet"
    when = ("stopped before saving them" if after else
            "stopped before the optimiser step, so the weights are unchanged")
    raise NonFiniteLoss(f"{what} at step {step}; {when} and {last}. Try a lower train.lr, "
                        f"train.grad_clip=1.0, or train.precision=fp32")


def skipped_step(tr, norm: float, loss: float) -> None:
    """fp16: the step was skipped and the scale will halve; past 16 halvings in a row (a scale
    below 1) the gradients overflow unscaled, which no scale can fix."""
    tr.skipped += 1
    if tr.scaler.get_scale() * tr.scaler.get_backoff_factor() < 1.0:
        stop(tr, f"fp16 gradients overflow even unscaled (gradient norm {norm}, loss {loss:.4g}, "
                 f"loss scale {tr.scaler.get_scale()})", tr.step + 1)


def what(kind: int, loss: float, norm: float | None) -> str:
    """The failed check, as the stop message names it (both paths: checked every step or here)."""
    if kind == LOSS:
        return f"non-finite loss ({loss})"
    if kind == NORM:
        return f"non-finite gradient norm ({norm}) with finite loss {loss:.4g}"
    # A huge lr overflows the weights with a finite loss and gradient norm.
    return f"non-finite weights after the optimiser step (loss {loss:.4g}, gradient norm {norm:.4g})"


class Guard:
    def __init__(self, device: torch.device):
        z = dict(device=device)
        self.bad = torch.zeros((), dtype=torch.bool, **z)            # sticky: a step failed
        self.step = torch.full((), -1, dtype=torch.int64, **z)        # the first failing step
        self.kind = torch.full((), -1, dtype=torch.int64, **z)        # LOSS, NORM or WEIGHTS
        self.loss = torch.zeros((), dtype=torch.float32, **z)         # its loss and gradient norm
        self.norm = torch.zeros((), dtype=torch.float32, **z)

    def note(self, step: int, kind: int, failed: Tensor, loss: Tensor, norm: Tensor | None = None) -> None:
        """Record check ``kind`` of ``step``: ``failed`` is a device bool; the first failure wins."""
        new = failed & ~self.bad
        self.step = torch.where(new, step, self.step)
        self.kind = torch.where(new, kind, self.kind)
        self.loss = torch.where(new, loss.float(), self.loss)
        if norm is not None:
            self.norm = torch.where(new, norm.float(), self.norm)
        self.bad = self.bad | failed

    def read(self) -> tuple[int, int, float, float] | None:
        """One sync: None when every step so far passed, else (step, kind, loss, norm)."""
        values = torch.stack([self.bad.long(), self.step, self.kind]).tolist()
        if not values[0]:
            return None
        loss, norm = torch.stack([self.loss, self.norm]).tolist()
        return values[1], values[2], loss, norm


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` can skip a step on a device flag: fused AdamW (``found_inf``), and
    MuonAdamW whose AdamW part is fused (its Muon part masks the update)."""
    from .optim import MuonAdamW
    if isinstance(optimizer, MuonAdamW):
        return skips_on_device(optimizer.adamw)
    return isinstance(optimizer, torch.optim.AdamW) and all(g.get("fused") for g in optimizer.param_groups)


def arm(optimizer: torch.optim.Optimizer, bad: Tensor | None) -> None:
    """Make ``optimizer``'s next steps skip where ``bad`` (None: never)."""
    from .optim import MuonAdamW
    if isinstance(optimizer, MuonAdamW):
        optimizer.muon.skip = bad
        arm(optimizer.adamw, bad)
        return
    optimizer.found_inf = bad.float() if bad is not None else None


def check_every(tr) -> int:
    """``train.check_every``: 'auto' is ``log_every`` in one CUDA process whose optimiser can skip a
    step on the device, else 1; a CPU waits for nothing, so it checks every step."""
    t = tr.cfg.train
    why = ("fp16 loss scaling reads its overflow flag every step" if tr.scaler.is_enabled() else
           "the ranks agree on each step's loss" if tr.dist.active else
           None if skips_on_device(tr.optimizer) else
           "the optimiser cannot skip a step on the device (train.fused=false)")
    if t.check_every == "auto":
        return t.log_every if tr.device.type == "cuda" and why is None else 1
    if t.check_every > 1 and why is not None:
        raise ValueError(f"train.check_every={t.check_every} needs the checks to stay on the device, but "
                         f"{why}; use train.check_every=1 (or auto)")
    return t.check_every


def device_step(tr) -> tuple[Tensor, Tensor, int]:
    """``Trainer.train_step`` without reading anything back: the loss, gradient-norm and weights
    checks are noted on the device and a failed step is skipped there."""
    g, step = tr.guard, tr.step + 1
    losses, units = tr._backward()
    loss = torch.stack(losses).mean()
    g.note(step, LOSS, ~loss.isfinite(), loss)
    norm = nn.utils.clip_grad_norm_(tr.model.parameters(), tr.cfg.train.grad_clip or float("inf"))
    g.note(step, NORM, ~norm.isfinite(), loss, norm)
    arm(tr.optimizer, g.bad)
    tr.optimizer.step()
    g.note(step, WEIGHTS, ~distributed.finite_flag(tr.model), loss, norm)
    tr._after_update()
    return loss, norm, units


def check(tr) -> None:
    """Read the device checks of the steps since the last check (one sync) and stop at the first
    that failed, as ``train_step`` would have there."""
    failed = tr.guard.read() if tr.guard is not None else None
    if failed is not None:
        step, kind, loss, norm = failed
        tr.pending = [p for p in tr.pending if p["step"] < step]
        stop(tr, what(kind, loss, norm), step, after=kind == WEIGHTS)


def flush(tr, log) -> None:
    """The trainer's steps since the last flush: checked (``check``), then their losses into the recent
    ones and every ``log_every``-th row into train.csv (rows before a failed step are kept). Its
    seconds are training time: with the checks on the device, the read waits for the queued steps."""
    if not tr.pending:
        return
    t0 = time.perf_counter()
    try:
        check(tr)
    finally:
        rows, tr.pending = tr.pending, []
        values = [(r["loss"], r["grad_norm"]) for r in rows]
        if values and isinstance(values[0][0], Tensor):  # one read for all of them
            values = torch.stack([torch.stack([a.float(), b.float()]) for a, b in values]).tolist()
        for row, (loss, norm) in zip(rows, values):
            row["loss"], row["grad_norm"] = loss, norm
            tr.recent.append(loss)
            if row["step"] % tr.cfg.train.log_every == 0:
                log.log_train(row)
        spent = time.perf_counter() - t0
        tr.train_s, tr.elapsed = tr.train_s + spent, tr.elapsed + spent
