"""The objective axis for language models: what is learned from a batch.

An objective is called as ``objective(model, batch) -> (loss, metrics)`` where
``batch`` is a dict of tensors. Token losses are averaged over the positions the
batch's ``loss_mask`` keeps (all positions when absent) and computed in fp32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)


def check_targets(logits: Tensor, target, loss_mask=None) -> None:
    """Targets are integer ids shaped like the outputs' positions and inside the vocabulary;
    a loss mask has their shape and finite 0..1 weights. Off the CPU the range checks run on
    the device (no host sync per step)."""
    if not isinstance(target, Tensor) or target.dtype not in _INT_DTYPES:
        raise TypeError(f"targets must be an integer tensor of token ids, got "
                        f"{getattr(target, 'dtype', type(target).__name__)}; convert with .long()")
    if target.shape != logits.shape[:-1]:
        raise ValueError(f"targets have shape {tuple(target.shape)} but the outputs have "
                         f"{tuple(logits.shape[:-1])} positions; pass one target id per input position")
    # Compiled, the check runs inside the graph: reading min/max back would split it in two.
    vocab, cpu = logits.shape[-1], target.device.type == "cpu" and not torch.compiler.is_compiling()
    if target.numel() and cpu:
        lo, hi = int(target.min()), int(target.max())
        if lo < 0 or hi >= vocab:
            raise ValueError(f"target id {lo if lo < 0 else hi} is outside the vocabulary [0, {vocab - 1}]; "
                             f"fix the targets or raise vocab_size")
    elif target.numel():
        torch._assert_async(((target >= 0) & (target < vocab)).all(),
                            f"a target id is outside the vocabulary [0, {vocab - 1}]")
    if loss_mask is None:
        return
    if not isinstance(loss_mask, Tensor) or loss_mask.shape != target.shape:
        raise ValueError(f"loss_mask must be a tensor of the targets' shape {tuple(target.shape)}, got "
                         f"{tuple(loss_mask.shape) if isinstance(loss_mask, Tensor) else type(loss_mask).__name__}")
    if loss_mask.is_floating_point():
        ok = torch.isfinite(loss_mask).all() & (loss_mask >= 0).all()
        if cpu and not ok:
            raise ValueError("loss_mask holds NaN, inf or negative weights; use a bool mask or weights >= 0 "
                             "(e.g. torch.nan_to_num(mask, 0.0))")
        if not cpu:
            torch._assert_async(ok, "loss_mask holds NaN, inf or negative weights")


def token_loss(logits: Tensor, target: Tensor, loss_mask: Tensor | None = None) -> tuple[Tensor, dict]:
    """Mean cross-entropy over kept positions, plus token accuracy and count. The accuracy is a
    detached 0-dim tensor, not a float: ``.item()`` here would make a GPU wait for every training
    step to finish before the host could queue the next (readers call ``float()`` when they log)."""
    check_targets(logits, target, loss_mask)
    nll = F.cross_entropy(logits.float().flatten(0, -2), target.flatten(), reduction="none")
    correct = (logits.argmax(-1) == target).flatten().float()
    if loss_mask is None:
        return nll.mean(), {"acc": correct.mean().detach(), "tokens": target.numel()}
    keep = loss_mask.flatten().to(nll.dtype)
    count = keep.sum().clamp_min(1.0)
    return (nll * keep).sum() / count, {"acc": ((correct * keep).sum() / count).detach(),
                                        "tokens": int(keep.sum().item())}


def need(batch: dict, *keys: str) -> None:
    if not isinstance(batch, dict):
        raise TypeError(f"model.loss takes a dict batch such as {{{', '.join(repr(k) + ': ...' for k in keys)}}}, "
                        f"got a {type(batch).__name__}")
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(f"batch lacks {missing}; it has {sorted(batch)}")


class CausalLM(nn.Module):
    """Next-token prediction: batch ``{"x": (b, n), "y": (b, n)[, "loss_mask"]}``."""
    citation = "Radford et al. 2018, eq. 1: L(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1})"

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x", "y")
        logits = model(batch["x"], key_padding=batch.get("key_padding"), state=batch.get("state"))
        return token_loss(logits, batch["y"], batch.get("loss_mask"))


class Seq2Seq(nn.Module):
    """Teacher-forced translation: batch ``{"src", "tgt_in", "tgt_out"[, "loss_mask",
    "src_padding", "tgt_padding", "offset"]}``; ``offset`` (b,) moves each row's positions
    (randomized offsets) and reaches only a model with positions (passed when present)."""
    citation = "Vaswani et al. 2017, section 3: teacher-forced next-token cross-entropy on the target"

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "src", "tgt_in", "tgt_out")
        at = {"offset": batch["offset"]} if "offset" in batch else {}
        logits = model(batch["src"], batch["tgt_in"], src_padding=batch.get("src_padding"),
                       tgt_padding=batch.get("tgt_padding"), **at)
        return token_loss(logits, batch["tgt_out"], batch.get("loss_mask"))
