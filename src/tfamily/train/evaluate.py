"""Evaluation on held-out data: loss (nats per scored token), perplexity, accuracy (per
token for LM tasks, per example for classification), and the task's own metrics derived
from the loss (bits per character for text, bits per dimension for pixels)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from . import distributed
from .device import autocast


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def carried_state(model: nn.Module, carries: bool, **state_kw):
    """The state a model carries from one batch to the next when the task ``carries`` it
    (contiguous streams), or None: only a state that declares itself ``carried`` (XL memory,
    an RNN's hidden state) is; a KV cache is decoding state, never carried in training.
    ``state_kw`` go to ``new_state`` (e.g. ``mem_len=`` for a longer memory at evaluation)."""
    if not carries or not callable(getattr(model, "new_state", None)):
        return None
    state = model.new_state(**state_kw)
    return state if state.carried else None


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[dict], *, device: torch.device, precision: str,
             dist: distributed.Dist | None = None, carries: bool = False, mem_len: int | None = None,
             metrics: Callable[[float], dict] | None = None) -> dict:
    """Token-weighted mean loss over ``batches`` (this rank's share; summed over ranks).
    ``carries``: a carried state runs through the batches (contiguous streams), fresh at the
    start. ``mem_len``: evaluate a memory model with this memory length instead of its
    training one (Dai et al. 2019, section 3.2: longer memory at evaluation). ``metrics``:
    the task's extra metrics from the mean loss."""
    dist = dist or distributed.Dist(device=device)
    was_training = model.training
    model.eval()
    state = carried_state(model, carries, **({} if mem_len is None else {"mem_len": mem_len}))
    if mem_len is not None and state is None:
        raise ValueError("--mem-len needs a memory model trained on contiguous streams (model.state.name: "
                         "xl_memory, with data.stream unset or true); this checkpoint carries no memory")
    loss_sum = correct = tokens = 0.0
    try:
        for batch in batches:
            batch = to_device(batch, device)
            if state is not None:
                batch["state"] = state
            with autocast(device, precision):
                loss, out = model.loss(batch)
            if "tokens" not in out:
                raise ValueError(f"{type(model).__name__}.loss must report how many targets it scored "
                                 f"(metrics['tokens']) to weight the evaluation; it reported {sorted(out)}")
            n = float(out["tokens"])
            loss_sum += float(loss) * n
            correct += float(out.get("acc", float("nan"))) * n
            tokens += n
    finally:
        model.train(was_training)
    loss_sum, correct, tokens = distributed.total([loss_sum, correct, tokens], dist)
    if tokens == 0:
        raise ValueError("evaluation saw no tokens; raise train.eval_tokens or use a longer eval split")
    loss = loss_sum / tokens
    out = {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "acc": correct / tokens, "tokens": int(tokens)}
    return {**out, **(metrics(loss) if metrics is not None else {})}


def level(batches: Iterable[dict], task, model: nn.Module, device: torch.device, precision: str,
          dist: distributed.Dist) -> list[dict]:
    """FSDP: each forward all-gathers weights with every rank, so all ranks must run as many.
    A rank dealt fewer evaluation batches (text windows go round-robin) first runs as many
    unscored forwards on its next training batch (the task's position is restored)."""
    mine = list(batches)
    short = max(int(n) for n in distributed.gather(torch.tensor([len(mine)]), dist)) - len(mine)
    if short:
        position = task.state_dict()
        batch = to_device(task.next(), device)
        task.load_state_dict(position)
        was_training = model.training
        model.eval()
        with torch.no_grad(), autocast(device, precision):
            for _ in range(short):
                model.loss(batch)
        model.train(was_training)
    return mine


def held_out(model: nn.Module, task, units: int, batch_size: int, *, device: torch.device, precision: str,
             dist: distributed.Dist) -> dict:
    """``model`` scored on ``units`` of ``task``'s held-out data. Torch's generators are restored after
    (an LSH layer draws rotations in evaluation too), so when a run evaluates never changes what it
    trains on."""
    batches = task.eval_batches(units, batch_size)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if dist.fsdp and dist.active:
            batches = level(batches, task, model, device, precision, dist)
        return evaluate(model, batches, device=device, precision=precision, dist=dist,
                        carries=task.carries_state, metrics=task.eval_metrics)
