"""The trainer's non-finite checks: a NaN or infinite loss, gradient norm or weight stops the run
naming the step (``stop_message``), before the optimiser touches the weights or before anything saves them;
fp16's skipped steps (``overflows_unscaled``); and the checks kept on the device, read every
``train.check_every`` steps (the rest of this module).

Reading the loss, the gradient norm and a weights-finite flag back to the host every step makes a
GPU wait for the host three times a step, idle while the next kernels are launched. Here the three
checks are tensors on the device: the first step that fails is recorded (its number, which check
and the values), a sticky ``bad`` flag makes the optimiser skip that step and every later one on the
device (fused AdamW's ``found_inf``; ``Muon`` masks its update), and the trainer reads it all in one
sync at its next check point (a log, evaluation or checkpoint step, or the end). The run then stops
as it would have at the bad step, with the weights as they were before it (or, for weights that an
update made non-finite, before anything saved them), and names that step.

The step on this path is ``device_step``; the reads are the guard callback's
(``callbacks/nonfinite.py``), the stop the ``Trainer``'s.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import distributed

LOSS, NORM, WEIGHTS = 0, 1, 2


class NonFiniteLoss(RuntimeError):
    """The loss (or gradient norm) became NaN or infinite; the run stopped before updating."""


def stop_message(what: str, step: int, last_ckpt, after: bool = False) -> str:
    """Why the run stopped: ``what`` failed at ``step``, ``after`` the update; ``last_ckpt`` the last good one."""
    last = f"the last good checkpoint is {last_ckpt}" if last_ckpt else "no checkpoint was written yet"
    when = ("stopped before saving them" if after else
            "stopped before the optimiser step, so the weights are unchanged")
    return (f"{what} at step {step}; {when} and {last}. Try a lower train.lr, "
            f"train.grad_clip=1.0, or train.precision=fp32")


def overflows_unscaled(scaler) -> str | None:
    """fp16, after a skipped step (the scale will halve): past 16 halvings in a row (a scale below 1)
    the gradients overflow unscaled, which no scale can fix; what to say then, else None."""
    if scaler.get_scale() * scaler.get_backoff_factor() < 1.0:
        return f"loss scale {scaler.get_scale()}"
    return None


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


def check_every(setting: int | str, log_every: int, device: torch.device, *, scaled: bool, ranks: bool,
                optimizer: torch.optim.Optimizer) -> int:
    """``train.check_every`` (``setting``): 'auto' is ``log_every`` in one CUDA process whose optimiser
    can skip a step on the device, else 1; a CPU waits for nothing, so it checks every step.
    ``scaled``: fp16 loss scaling is on; ``ranks``: several processes train together."""
    why = ("fp16 loss scaling reads its overflow flag every step" if scaled else
           "the ranks agree on each step's loss" if ranks else
           None if skips_on_device(optimizer) else
           "the optimiser cannot skip a step on the device (train.fused=false)")
    if setting == "auto":
        return log_every if device.type == "cuda" and why is None else 1
    if setting > 1 and why is not None:
        raise ValueError(f"train.check_every={setting} needs the checks to stay on the device, but "
                         f"{why}; use train.check_every=1 (or auto)")
    return setting


def failure(g: Guard | None) -> tuple[str, int, bool] | None:
    """Read ``g`` (one sync): None when every step so far passed, else the first failed check as the
    stop names it, its step, and whether it failed after the update (``WEIGHTS``)."""
    failed = g.read() if g is not None else None
    if failed is None:
        return None
    step, kind, loss, norm = failed
    return what(kind, loss, norm), step, kind == WEIGHTS


def device_step(g: Guard, step: int, backward: Callable[[], tuple[list, int]], model: nn.Module,
                optimizer: torch.optim.Optimizer, grad_clip: float | None,
                after_update: Callable[[], None]) -> tuple[Tensor, Tensor, int]:
    """Training step ``step`` without reading anything back: ``backward()`` gives the micro-batches'
    losses on the device and the units; the loss, gradient-norm and weights checks are noted in ``g``
    and a failed step is skipped on the device; ``after_update()`` follows the optimiser step."""
    losses, units = backward()
    loss = torch.stack(losses).mean()
    g.note(step, LOSS, ~loss.isfinite(), loss)
    norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip or float("inf"))
    g.note(step, NORM, ~norm.isfinite(), loss, norm)
    arm(optimizer, g.bad)
    optimizer.step()
    g.note(step, WEIGHTS, ~distributed.finite_flag(model), loss, norm)
    after_update()
    return loss, norm, units
