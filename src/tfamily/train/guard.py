"""Non-finite checks that stay on the device, read every ``train.check_every`` steps.

Reading the loss, the gradient norm and a weights-finite flag back to the host every step makes a
GPU wait for the host three times a step, idle while the next kernels are launched. Here the three
checks are tensors on the device: the first step that fails is recorded (its number, which check
and the values), a sticky ``bad`` flag makes the optimiser skip that step and every later one on the
device (fused AdamW's ``found_inf``; ``Muon`` masks its update), and the trainer reads it all in one
sync at its next check point (a log, evaluation or checkpoint step, or the end). The run then stops
as it would have at the bad step, with the weights as they were before it (or, for weights that an
update made non-finite, before anything saved them), and names that step.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

LOSS, NORM, WEIGHTS = 0, 1, 2


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


def weights_finite(model: nn.Module) -> Tensor:
    """A device bool: every weight is finite (one fused max-abs pass, no sync)."""
    params = [p.detach() for p in model.parameters() if p.numel()]
    if not params:
        return torch.ones((), dtype=torch.bool)
    return torch.stack(torch._foreach_norm(params, float("inf"))).isfinite().all()


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
