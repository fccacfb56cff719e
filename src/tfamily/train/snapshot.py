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

import json
import re
from pathlib import Path

import torch

from . import checkpoint, distributed
from .optim import flatten_optimizer, unflatten_optimizer
from .rng import capture_rng, restore_rng


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


def save(tr) -> Path | None:
    """Write a checkpoint of trainer ``tr`` (every rank takes part; rank 0 writes)."""
    d = tr.dist
    rng_t, rng_meta = capture_rng()
    for r, s in enumerate(distributed.gather(torch.get_rng_state(), d)):
        rng_t[f"torch.rank{r}"] = s
    # FSDP: every rank takes part in gathering the whole weights and moments to rank 0.
    weights = distributed.full_weights(tr.model) if d.fsdp else tr.model
    opt_state = distributed.optimizer_state(tr.model, tr.optimizer, d)
    opt_t, opt_meta = flatten_optimizer(opt_state) if opt_state is not None else ({}, None)
    carry_t, carry_meta = _carry_out(tr.state, d)
    position = tr.task.state_dict()
    # A task's position may hold tensors (an RL rollout buffer): safetensors, not JSON.
    data_t = {k: v for k, v in position.items() if isinstance(v, torch.Tensor)}
    groups = {"optimizer": opt_t, "rng": rng_t, **({"carry": carry_t} if tr.state is not None else {}),
              **({"data": data_t} if data_t else {})}
    path = None
    if d.main:
        task = tr.task
        meta = {"tokens": tr.tokens, "elapsed": tr.elapsed, "world_size": d.world_size,
                "spec": tr.spec.to_dict() if tr.spec is not None else None, "config": tr.cfg.to_dict(),
                "vocab": task.vocab.to_json() if task.vocab is not None else None,
                "source": {"name": task.name, "kind": task.kind, "seq_len": task.seq_len, "unit": task.unit},
                "scheduler": tr.scheduler.state_dict(), "optimizer": opt_meta, "rng": rng_meta,
                "data": {k: v for k, v in position.items() if k not in data_t}, "carry": carry_meta,
                "precision": tr.precision, "threads": torch.get_num_threads(),
                "scaler": tr.scaler.state_dict() if tr.scaler.is_enabled() else None, "skipped": tr.skipped,
                "metrics": {"train_loss": tr.train_loss, "val": tr.last_eval},
                "recent": list(tr.recent), "data_dir": tr.data_dir}
        json.dumps(meta)  # fail before writing anything if some state is not plain data
        path = checkpoint.write(tr.run_dir / "checkpoints", tr.step, weights, groups, meta, tr.cfg.train.keep)
        tr.last_ckpt = path
    tr.saved_step = tr.step
    distributed.barrier(d)
    return path


def restore_scaler(tr, ck: checkpoint.Loaded) -> None:
    """fp16's loss scale and its growth counter, so a resumed run skips and grows as the
    uninterrupted one (a fresh scale would restart at 2**16 and skip steps the run did not)."""
    if tr.scaler.is_enabled() and ck.meta.get("scaler"):
        tr.scaler.load_state_dict(ck.meta["scaler"])
    tr.skipped = ck.meta.get("skipped", 0)


def restore(tr, ck: checkpoint.Loaded) -> None:
    """Put the state saved in ``ck`` into trainer ``tr`` (built for the same run); a piece of
    saved state missing inside a section (an edited checkpoint) is a ``CheckpointError``."""
    try:
        _restore(tr, ck)
    except KeyError as e:
        raise checkpoint.CheckpointError(
            f"{ck.path} lacks {e} in its saved state; the checkpoint is corrupt or was edited: resume from an "
            f"earlier checkpoint (pass its directory) or start a new run") from e


def _restore(tr, ck: checkpoint.Loaded) -> None:
    meta = ck.meta
    if tr.spec is not None and meta["spec"] != tr.spec.to_dict():
        here = tr.spec.to_dict()
        diff = sorted(k for k in set(meta["spec"] or {}) | set(here) if (meta["spec"] or {}).get(k) != here.get(k))
        raise ValueError(f"{ck.path} was trained with a different spec (differs in {diff}); "
                         f"resume without model overrides")
    d = tr.dist
    if meta["world_size"] != d.world_size and meta.get("carry"):
        raise ValueError(f"{ck.path} carries each of its {meta['world_size']} rank(s)' own model state (memory "
                         f"of their rows); resume it with {meta['world_size']} process(es), not {d.world_size}")
    ck.load_weights(tr.model, tr.device, distributed.load_full_weights(tr.model) if d.fsdp else None)
    try:
        distributed.load_optimizer_state(tr.model, tr.optimizer,
                                         unflatten_optimizer(ck.group("optimizer"), meta["optimizer"]), d)
    except ValueError as e:  # another parameter layout, e.g. a checkpoint from before the fused QKV projection
        raise ValueError(f"{ck.path}: its optimizer state does not fit this model's parameters ({e}); the "
                         f"weights still load (tfamily eval / generate), but the run cannot resume: start a new "
                         f"run from these weights") from e
    tr.scheduler.load_state_dict(meta["scheduler"])
    tr.task.load_state_dict({**meta["data"], **ck.group("data")})
    rng = ck.group("rng")
    # Resumed on more ranks than wrote it, a new rank keeps the stream a new run gives it (its
    # rows were another rank's, so no saved dropout stream could continue them anyway).
    mine = rng.get(f"torch.rank{d.rank}", torch.get_rng_state())
    restore_rng(rng, meta["rng"], mine)
    tr.step, tr.tokens, tr.elapsed = meta["step"], meta["tokens"], meta["elapsed"]
    tr.recent.extend(meta.get("recent") or [])  # so a resumed run reports the same train_loss
    if tr.state is not None and meta.get("carry"):
        _carry_in(tr.state, ck.group("carry"), meta["carry"], tr.dist.rank, tr.device)
