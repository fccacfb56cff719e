"""Data-parallel training under torchrun (DistributedDataParallel).

The same entry point runs alone or as one of N ranks: torchrun sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and ``setup`` joins the
process group (gloo on CPU, NCCL on CUDA). Each rank trains on its own rows
of the global batch (``tfamily.data.batching``'s convention), DDP averages
gradients, and rank 0 alone writes logs and checkpoints.
"""
from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .device import resolve_device


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local)
    if world > 1 and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(minutes=30))
    return Dist(rank, world, local, dev)


def teardown(d: Dist, sync: bool = True) -> None:
    """Leave the process group. After a normal finish every rank first meets at a barrier:
    a rank destroying its group while a peer's gloo threads still talk to it was seen to
    abort at exit ("terminate called without an active exception"). After an error
    (``sync=False``) a peer may be gone, so nothing waits for it."""
    if d.active and dist.is_initialized():
        if sync:
            dist.barrier()
        gc.collect()  # a DDP wrapper the caller dropped (Trainer.close) releases its reducer first
        dist.destroy_process_group()


def wrap(module: nn.Module, d: Dist) -> nn.Module:
    if not d.active:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(module, device_ids=[d.device.index] if d.device.type == "cuda" else None)


def mean(values: list[float], d: Dist) -> list[float]:
    """Average Python floats over ranks (one all-reduce)."""
    if not d.active:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t)
    return (t / d.world_size).tolist()


def total(values: list[float], d: Dist) -> list[float]:
    if not d.active:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t)
    return t.tolist()


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank when it is True on any (a stop decision all ranks must share)."""
    if not d.active:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=d.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def gather(t: Tensor, d: Dist) -> list[Tensor]:
    """Every rank's copy of a same-shaped tensor (e.g. RNG states), on every rank."""
    if not d.active:
        return [t]
    src = t.to(d.device)
    out = [torch.empty_like(src) for _ in range(d.world_size)]
    dist.all_gather(out, src)
    return [o.cpu() for o in out]


def barrier(d: Dist) -> None:
    if d.active:
        dist.barrier()
