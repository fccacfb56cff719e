"""Data-parallel training under torchrun: DistributedDataParallel (the default) or
fully sharded (``train.parallel=fsdp``, PyTorch's ``fully_shard``).

The same entry point runs alone or as one of N ranks: torchrun sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and ``setup`` joins the
process group (gloo on CPU, NCCL on CUDA). Each rank trains on its own rows
of the global batch (``tfamily.data.batching``'s convention), DDP averages
gradients, and rank 0 alone writes logs and checkpoints.

FSDP (Zhao et al. 2023; ZeRO stage 3, Rajbhandari et al. 2020) gives each rank 1/N of every
weight, gradient and AdamW moment and all-gathers a layer's weights just before it runs. A
checkpoint holds the whole state gathered to rank 0, in the same files as a DDP or single-process
run's, so any of them resumes on any number of ranks. FSDP over one rank shards nothing but
runs the same code (the check a one-GPU machine can make).
"""
from __future__ import annotations

import contextlib
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
    fsdp: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto", parallel: str = "ddp") -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), or, for FSDP in a
    single process, a group of one (``fully_shard`` needs a group)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local)
    fsdp = parallel == "fsdp"
    if (world > 1 or fsdp) and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        # A group of one needs no rendezvous: an in-memory store, not torchrun's MASTER_ADDR/PORT.
        store = {"store": dist.HashStore()} if world == 1 else {}
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(minutes=30), **store)
    return Dist(rank, world, local, dev, fsdp)


def teardown(d: Dist, sync: bool = True) -> None:
    """Leave the process group. After a normal finish every rank first meets at a barrier:
    a rank destroying its group while a peer's gloo threads still talk to it was seen to
    abort at exit ("terminate called without an active exception"). After an error
    (``sync=False``) a peer may be gone, so nothing waits for it."""
    if (d.active or d.fsdp) and dist.is_initialized():
        if sync:
            dist.barrier()
        gc.collect()  # a DDP wrapper the caller dropped (Trainer.close) releases its reducer first
        dist.destroy_process_group()


def shard(model: nn.Module, d: Dist) -> nn.Module:
    """FSDP: shard ``model`` in place over the ranks (before its optimiser is made: the
    parameters become DTensors). Each layer of a ``Stack`` is its own group, all-gathered just
    before it runs and freed after, so a rank holds one layer's full weights at a time; the
    rest (embeddings, the head, any other depth: a weight-shared or ACT-halting recurrence, whose
    number of layer calls depends on the data and would differ between ranks, or a reversible
    stack's recomputation) is gathered once per forward as the root group.

    ``fully_shard`` cannot split a scalar (a learned logit scale): scalars stay whole on every
    rank, outside FSDP, and their gradients are averaged over ranks as each backward produces
    them (averaging is linear, so doing it per micro-batch equals doing it once per step)."""
    if not d.fsdp:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    from ..nn.depth import Stack
    mesh = init_device_mesh(d.device.type, (d.world_size,))
    scalars = {p for p in model.parameters() if p.dim() == 0}
    for m in list(model.modules()):
        if isinstance(m, Stack):
            for block in m.blocks:
                fully_shard(block, mesh=mesh, ignored_params=scalars)
    fully_shard(model, mesh=mesh, ignored_params=scalars)
    register_fsdp_forward_method(model, "loss")  # training and evaluation call model.loss, not forward
    if d.active:
        for p in scalars:
            p.register_post_accumulate_grad_hook(lambda p: _average(p.grad, d))
    return model


def local(t: Tensor) -> Tensor:
    """This rank's part of a tensor: an FSDP shard's local tensor, else the tensor itself."""
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t


def _average(t: Tensor, d: Dist) -> None:
    dist.all_reduce(t)  # a sum: gloo has no AVG
    t.div_(d.world_size)


class LossOf(nn.Module):
    """``model.loss`` as a module forward, so DDP sees the call (it hooks ``forward``).
    A carried state rides on an attribute: DDP's input handling would copy a
    state that is a list (``SegmentMemory``) into a plain list."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.state = None

    def forward(self, batch: dict):
        if self.state is not None:
            batch = {**batch, "state": self.state}
        return self.model.loss(batch)


def wrap(module: nn.Module, d: Dist) -> nn.Module:
    """DDP around the loss module; an FSDP model is already sharded (``shard``)."""
    if not d.active or d.fsdp:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(module, device_ids=[d.device.index] if d.device.type == "cuda" else None)


def no_sync(wrapped: nn.Module, model: nn.Module, d: Dist):
    """A context in which backward keeps this rank's gradients local (a micro-batch that is not
    the step's last): DDP's ``no_sync``; FSDP's ``set_requires_gradient_sync(False)``."""
    if not d.fsdp:
        return wrapped.no_sync()
    return _fsdp_no_sync(model)


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


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


# -- the whole state of a sharded model, for checkpoints -------------------------------------------
def _full(cpu: bool = True):
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(full_state_dict=True, cpu_offload=cpu)


def _first_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its first name (a tied parameter has several)."""
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        first.setdefault(id(p), name)
    return first


def full_weights(model: nn.Module) -> dict[str, Tensor]:
    """An FSDP model's weights gathered whole to rank 0's CPU (empty on the other ranks; every rank
    must call it), each tied parameter once under its first name, as ``checkpoint.model_tensors``
    stores an unsharded model's."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    state = get_model_state_dict(model, options=_full())
    first = _first_names(model)
    tied = {n for n, p in model.named_parameters(remove_duplicate=False) if first[id(p)] != n}
    return {k: v.contiguous() for k, v in state.items() if k not in tied}


def load_full_weights(model: nn.Module):
    """``load_state_dict(state, strict)`` for an FSDP model: every rank passes the whole state
    and keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    def load(state: dict[str, Tensor], strict: bool = True):
        return set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=strict))
    return load


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, d: Dist) -> dict | None:
    """``optimizer.state_dict()``; for FSDP the whole state gathered to rank 0 (None elsewhere)
    with its parameters numbered as ``state_dict`` numbers them (in group order), so the
    checkpoint is the one an unsharded run writes."""
    if not d.fsdp:
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    full = get_optimizer_state_dict(model, optimizer, options=_full())
    if not d.main:
        return None
    ids = {name: i for i, name in enumerate(n for g in full["param_groups"] for n in g["params"])}
    return {"state": {ids[name]: s for name, s in full["state"].items()},
            "param_groups": [{**g, "params": [ids[n] for n in g["params"]]} for g in full["param_groups"]]}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, d: Dist) -> None:
    """Inverse of ``optimizer_state``, on every rank."""
    if not d.fsdp:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    first = _first_names(model)
    names = [[first[id(p)] for p in g["params"]] for g in optimizer.param_groups]
    sizes = [len(g["params"]) for g in state["param_groups"]]
    if sizes != [len(g) for g in names]:
        # The message optimizer.load_state_dict gives for the same mismatch.
        raise ValueError(f"loaded state dict contains parameter groups of sizes {sizes}, this optimizer's "
                         f"are {[len(g) for g in names]}")
    by_id = [n for g in names for n in g]
    full = {"state": {by_id[i]: s for i, s in state["state"].items()},
            "param_groups": [{**g, "params": names[k]} for k, g in enumerate(state["param_groups"])]}
    set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))


def finite_flag(model: nn.Module) -> Tensor:
    """A device bool, no host sync: every weight of this rank is finite (one fused max-abs pass;
    under FSDP its own shards, some of which may be empty, which an infinity norm refuses)."""
    params = [t for p in model.parameters() if (t := local(p.detach())).numel()]
    if not params:
        return torch.ones((), dtype=torch.bool)
    return torch.stack(torch._foreach_norm(params, float("inf"))).isfinite().all()


def weights_finite(model: nn.Module, d: Dist | None = None) -> bool:
    """Whether every weight is finite (``finite_flag``, read back); under FSDP the ranks agree."""
    ok = bool(finite_flag(model))
    return not any_rank(not ok, d) if d is not None and d.fsdp else ok
