"""A run's resumable state in a checkpoint, and back: weights, AdamW moments, the
scheduler, every rank's RNG states, the task's position and the model's carried state.

Batch t depends only on (seed, t), and the carried state goes through the State
protocol (``state_dict`` / ``load_state_dict``; its tensors saved per rank), so a
resumed run repeats the uninterrupted run's losses bit for bit (same device and thread
count), whatever the state is: XL memory, an RNN's hidden state. A checkpoint is the same
files whether one process, DDP or FSDP wrote it (FSDP gathers the whole state to rank 0), so it
resumes on another number of ranks, unless the model carries per-rank state.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import torch
from torch import nn

from ..spec import Spec
from . import checkpoint, distributed
from .optim import flatten_optimizer, unflatten_optimizer
from .rng import capture_rng, restore_rng
from .task import Task


def _carry_out(state, d) -> tuple[dict, dict | None]:
    """The carried state as (tensors by name and rank, plain values for the meta)."""
    if state is None:
        return {}, None
    tensors, values = {}, {}
    for name, v in state.state_dict().items():
        if isinstance(v, torch.Tensor):
            # gloo gathers no bool tensors (a reset row's memory mask): send bytes, keep the dtype.
            sent = v.to(torch.uint8) if v.dtype == torch.bool else v
            for r, t in enumerate(distributed.gather(sent.contiguous(), d)):
                tensors[f"{name}.rank{r}"] = t.bool() if v.dtype == torch.bool else t
        else:
            values[name] = v  # plain values are the same on every rank (e.g. the stream offset)
    return tensors, {"values": values}


def _carry_in(state, group: dict, meta: dict, rank: int, device: torch.device) -> None:
    values = meta["values"] if "values" in meta else {"offset": meta["offset"]}  # runs before the State protocol
    mine = {m.group(1): t.to(device) for k, t in group.items()
            if (m := re.fullmatch(rf"(.+)\.rank{rank}", k)) is not None}
    state.load_state_dict({**values, **mine})


@dataclasses.dataclass
class Parts:
    """The objects a checkpoint saves and a resume restores (the run's counters come as plain values)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    task: Task
    state: object | None              # the model's carried state (``nn/state/``), if any
    dist: distributed.Dist
    device: torch.device


def save(p: Parts, run: dict, root: Path, step: int, keep: int, on_save=None) -> Path | None:
    """Write a checkpoint of ``step`` under ``root`` (every rank takes part; rank 0 writes and gets its
    path). ``run``: the run's own plain values for ``meta.json`` (counters, spec, config, metrics, ...);
    ``on_save(step, phase)``: told as the write goes (``callbacks.SeesSaves``)."""
    d = p.dist
    rng_t, rng_meta = capture_rng()
    for r, s in enumerate(distributed.gather(torch.get_rng_state(), d)):
        rng_t[f"torch.rank{r}"] = s
    # FSDP: every rank takes part in gathering the whole weights and moments to rank 0.
    weights = distributed.full_weights(p.model) if d.fsdp else p.model
    opt_state = distributed.optimizer_state(p.model, p.optimizer, d)
    opt_t, opt_meta = flatten_optimizer(opt_state) if opt_state is not None else ({}, None)
    carry_t, carry_meta = _carry_out(p.state, d)
    position = p.task.state_dict()
    # A task's position may hold tensors (an RL rollout buffer): safetensors, not JSON.
    data_t = {k: v for k, v in position.items() if isinstance(v, torch.Tensor)}
    groups = {"optimizer": opt_t, "rng": rng_t, **({"carry": carry_t} if p.state is not None else {}),
              **({"data": data_t} if data_t else {})}
    path = None
    if d.main:
        task = p.task
        meta = {**run, "world_size": d.world_size,
                "vocab": task.vocab.to_json() if task.vocab is not None else None,
                "source": {"name": task.name, "kind": task.kind, "seq_len": task.seq_len, "unit": task.unit},
                "scheduler": p.scheduler.state_dict(), "optimizer": opt_meta, "rng": rng_meta,
                "data": {k: v for k, v in position.items() if k not in data_t}, "carry": carry_meta,
                "threads": torch.get_num_threads()}
        json.dumps(meta)  # fail before writing anything if some state is not plain data
        path = checkpoint.write(root, step, weights, groups, meta, keep, on_save)
    distributed.barrier(d)
    return path


def restore_scaler(scaler, meta: dict) -> int:
    """fp16's loss scale and its growth counter, so a resumed run skips and grows as the
    uninterrupted one (a fresh scale would restart at 2**16 and skip steps the run did not);
    returns the steps skipped so far."""
    if scaler.is_enabled() and meta.get("scaler"):
        scaler.load_state_dict(meta["scaler"])
    return meta.get("skipped", 0)


def restore(p: Parts, ck: checkpoint.Loaded, spec: Spec | None) -> dict:
    """Put the state saved in ``ck`` into ``p`` (built for the same run, of ``spec``) and return the
    run's counters (step, tokens, elapsed, recent losses); a piece of saved state missing inside a
    section (an edited checkpoint) is a ``CheckpointError``."""
    try:
        return _restore(p, ck, spec)
    except KeyError as e:
        raise checkpoint.CheckpointError(
            f"{ck.path} lacks {e} in its saved state; the checkpoint is corrupt or was edited: resume from an "
            f"earlier checkpoint (pass its directory) or start a new run") from e


def _restore(p: Parts, ck: checkpoint.Loaded, spec: Spec | None) -> dict:
    meta = ck.meta
    if spec is not None and meta["spec"] != spec.to_dict():
        here = spec.to_dict()
        diff = sorted(k for k in set(meta["spec"] or {}) | set(here) if (meta["spec"] or {}).get(k) != here.get(k))
        raise ValueError(f"{ck.path} was trained with a different spec (differs in {diff}); "
                         f"resume without model overrides")
    d = p.dist
    if meta["world_size"] != d.world_size and meta.get("carry"):
        raise ValueError(f"{ck.path} carries each of its {meta['world_size']} rank(s)' own model state (memory "
                         f"of their rows); resume it with {meta['world_size']} process(es), not {d.world_size}")
    ck.load_weights(p.model, p.device, distributed.load_full_weights(p.model) if d.fsdp else None)
    try:
        distributed.load_optimizer_state(p.model, p.optimizer,
                                         unflatten_optimizer(ck.group("optimizer"), meta["optimizer"]), d)
    except ValueError as e:  # another parameter layout, e.g. a checkpoint from before the fused QKV projection
        raise ValueError(f"{ck.path}: its optimizer state does not fit this model's parameters ({e}); the "
                         f"weights still load (tfamily eval / generate), but the run cannot resume: start a new "
                         f"run from these weights") from e
    p.scheduler.load_state_dict(meta["scheduler"])
    p.task.load_state_dict({**meta["data"], **ck.group("data")})
    rng = ck.group("rng")
    # Resumed on more ranks than wrote it, a new rank keeps the stream a new run gives it (its
    # rows were another rank's, so no saved dropout stream could continue them anyway).
    mine = rng.get(f"torch.rank{d.rank}", torch.get_rng_state())
    restore_rng(rng, meta["rng"], mine)
    if p.state is not None and meta.get("carry"):
        _carry_in(p.state, ck.group("carry"), meta["carry"], d.rank, p.device)
    # recent: the last losses, so a resumed run reports the same train_loss
    return {"step": meta["step"], "tokens": meta["tokens"], "elapsed": meta["elapsed"],
            "recent": meta.get("recent") or []}
