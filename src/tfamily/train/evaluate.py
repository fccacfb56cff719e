"""Evaluation on held-out data: loss (nats per scored token), bits per character
for text (loss / ln 2: with character and byte vocabularies a token is a
character or byte, the convention enwik8 and text8 results are reported in),
perplexity, and accuracy (per token for LM tasks, per example for
classification)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from . import distributed
from .device import autocast


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def carried_state(model: nn.Module, stream: bool, **state_kw):
    """The state a memory model carries from one contiguous segment to the next, or None.

    Hook for memory models (Transformer-XL): with ``data.stream`` true and a model whose
    ``new_state()`` is ``carried`` (``SegmentMemory``), the trainer keeps that state across steps
    and passes it as ``batch["state"]``; the model updates it in place (detached).
    A KV cache is decoding state, not training state, so it is never carried.
    ``state_kw`` go to ``new_state`` (e.g. ``mem_len=`` for a longer memory at evaluation)."""
    if not stream or not callable(getattr(model, "new_state", None)):
        return None
    state = model.new_state(**state_kw)
    return state if state.carried else None


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[dict], *, device: torch.device, precision: str,
             dist: distributed.Dist | None = None, stream: bool = False, text: bool = True,
             mem_len: int | None = None) -> dict:
    """Token-weighted mean loss over ``batches`` (this rank's share; summed over ranks).
    ``mem_len``: evaluate a memory model with this memory length instead of its training one
    (Dai et al. 2019, section 3.2: longer memory at evaluation)."""
    dist = dist or distributed.Dist(device=device)
    was_training = model.training
    model.eval()
    state = carried_state(model, stream, **({} if mem_len is None else {"mem_len": mem_len}))
    if mem_len is not None and state is None:
        raise ValueError("--mem-len needs a memory model trained on streams (data.stream: true, "
                         "model.state.name: xl_memory); this checkpoint carries no memory")
    loss_sum = correct = tokens = 0.0
    try:
        for batch in batches:
            batch = to_device(batch, device)
            if state is not None:
                batch["state"] = state
            with autocast(device, precision):
                loss, metrics = model.loss(batch)
            n = float(metrics.get("tokens", batch["y"].numel()))
            loss_sum += float(loss) * n
            correct += float(metrics.get("acc", float("nan"))) * n
            tokens += n
    finally:
        model.train(was_training)
    loss_sum, correct, tokens = distributed.total([loss_sum, correct, tokens], dist)
    if tokens == 0:
        raise ValueError("evaluation saw no tokens; raise train.eval_tokens or use a longer eval split")
    loss = loss_sum / tokens
    out = {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "acc": correct / tokens, "tokens": int(tokens)}
    if text:
        out["bpc"] = loss / math.log(2)
    return out
