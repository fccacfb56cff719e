"""AdamW with warm-up then cosine decay, and their state as tensors + JSON.

Loshchilov & Hutter 2019 (AdamW): weight decay is decoupled from the gradient
step. As in GPT-2/nanoGPT, only matrices (dim >= 2, i.e. linear and embedding
weights) decay; biases and norm gains do not, since shrinking them only
fights the normalisation.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for p in model.parameters():  # parameters() yields tied weights once
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.95), eps: float = 1e-8,
          fused: bool | None = None) -> torch.optim.AdamW:
    """``fused=None``: the fused kernel when every parameter is a float on CPU or CUDA (one kernel
    per step instead of a few per tensor; measured 4.6 -> 1.4 ms per step on the demo model)."""
    groups = param_groups(model, weight_decay)
    if fused is None:
        params = [p for g in groups for p in g["params"]]
        fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)


class WarmupCosine:
    """LR multiplier: linear warm-up over ``warmup`` steps, then cosine from 1 down to
    ``min_ratio`` at ``total`` steps, flat after. A callable object (not a lambda) so
    that LambdaLR saves ``total`` in its state: a time-budgeted run moves ``total`` to
    where the budget will end (``Trainer``), and a resumed run picks that up."""

    def __init__(self, warmup: int, total: int, min_ratio: float = 0.1):
        self.warmup, self.total, self.min_ratio = int(warmup), int(total), float(min_ratio)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        span = max(1, self.total - self.warmup)
        t = min(1.0, (step - self.warmup) / span)
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup: int, total: int, min_ratio: float) -> LambdaLR:
    return LambdaLR(optimizer, WarmupCosine(warmup, total, min_ratio))


# -- state without pickle: tensors to safetensors, the rest to JSON ------------------------------
def flatten_optimizer(state: dict) -> tuple[dict[str, Tensor], dict]:
    """``optimizer.state_dict()`` -> (tensors keyed 'state.<param>.<name>', JSON-able rest)."""
    tensors, meta = {}, {"param_groups": [], "state": {}}
    for group in state["param_groups"]:
        meta["param_groups"].append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()})
    for pid, pstate in state["state"].items():
        plain = {}
        for name, v in pstate.items():
            if isinstance(v, Tensor):
                tensors[f"state.{pid}.{name}"] = v.detach().contiguous()
            else:
                plain[name] = v
        meta["state"][str(pid)] = {"tensors": [n for n, v in pstate.items() if isinstance(v, Tensor)],
                                   "plain": plain}
    return tensors, meta


def unflatten_optimizer(tensors: dict[str, Tensor], meta: dict) -> dict:
    """Inverse of ``flatten_optimizer``: a dict ``optimizer.load_state_dict`` accepts."""
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    state = {}
    for pid, entry in meta["state"].items():
        s = dict(entry["plain"])
        for name in entry["tensors"]:
            s[name] = tensors[f"state.{pid}.{name}"]
        state[int(pid)] = s
    return {"state": state, "param_groups": groups}
