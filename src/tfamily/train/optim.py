"""AdamW (or Muon for the hidden matrices with AdamW for the rest) with warm-up then cosine
decay, and their state as tensors + JSON.

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

from ..settings.run import OPTIMIZERS


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
    return _adamw_of(param_groups(model, weight_decay), lr, betas, eps, fused)


def _adamw_of(groups: list[dict], lr: float, betas, eps: float, fused: bool | None = None) -> torch.optim.AdamW:
    if fused is None:
        params = [p for g in groups for p in g["params"]]
        fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)


def muon_params(model: nn.Module) -> set[int]:
    """ids of the weights Muon takes: the matrices of ``nn.Linear`` layers inside the network.
    Embeddings, the output head (``model.head``, tied or not), biases, gains and recurrent
    cells' weights stay with AdamW, as Jordan et al. (2024) prescribe for the input and output
    layers and the non-matrix parameters."""
    head = getattr(model, "head", None)
    skip = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
    skip |= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {id(m.weight) for m in model.modules()
            if isinstance(m, nn.Linear) and m.weight.requires_grad and id(m.weight) not in skip}


def newton_schulz(g: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> Tensor:
    """Muon's orthogonalisation (Jordan et al. 2024): the quintic Newton-Schulz iteration on
    G / ||G||_F, on the wide side, in ``dtype``; the same operations as torch.optim.Muon, which
    fixes the dtype to bf16. ``g`` may be a stack (n, A, B) of same-shape matrices, each
    normalised by its own norm: one batched product per iteration instead of n."""
    a, b, c = coefficients
    x = g.to(dtype)
    wide = g.size(-2) > g.size(-1)
    if wide:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    mul = torch.addmm if x.dim() == 2 else torch.baddbmm
    for _ in range(steps):
        gram = x @ x.mT
        x = mul(x, mul(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if wide else x


class Muon(torch.optim.Muon):
    """torch.optim.Muon (same hyper-parameters, param groups and state) with the Newton-Schulz
    iteration in ``ns_dtype``. Written here because torch's runs it in bf16 always, which is
    fast on GPUs and bf16-native CPUs but emulated on others (the AVX2-only CI kind): on the demo
    model, emulated bf16 made Muon's step take ~700 ms against ~18 ms native or in fp32, beside
    ~90-100 ms for its forward and backward (``experiments/training/muon_step_time.py``, run with
    ONEDNN_MAX_CPU_ISA=AVX2 on an AMX Xeon).
    ``tests/train/test_optim.py`` checks it equals torch.optim.Muon in bf16."""

    def __init__(self, params, *, ns_dtype: torch.dtype, **kw):
        super().__init__(params, **kw)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        """torch.optim.Muon's step, with the Newton-Schulz iterations of same-shape matrices
        batched (``newton_schulz`` on a stack): a transformer's layers repeat a handful of shapes,
        so 4 layers' 16 matrices take 3 batched iterations instead of 16."""
        if closure is not None:
            raise ValueError("Muon.step takes no closure")
        skip = getattr(self, "skip", None)  # a device bool (``guard.py``): leave weights and momentum as they are
        for g in self.param_groups:
            by_shape: dict[tuple, list] = {}
            for p in g["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                if skip is None:
                    buf.lerp_(p.grad, 1 - g["momentum"])
                else:  # where, not a zero weight: a skipped step's gradient may be NaN
                    buf.copy_(torch.where(skip, buf, buf.lerp(p.grad, 1 - g["momentum"])))
                update = p.grad.lerp(buf, g["momentum"]) if g["nesterov"] else buf
                by_shape.setdefault((tuple(p.shape), p.dtype, p.device), []).append((p, update))
            for pairs in by_shape.values():
                updates = [u for _, u in pairs]
                ortho = newton_schulz(torch.stack(updates) if len(updates) > 1 else updates[0], g["ns_coefficients"],
                                      g["ns_steps"], g["eps"], self.ns_dtype)
                ortho = ortho.unbind(0) if len(updates) > 1 else [ortho]
                for (p, _), update in zip(pairs, ortho):
                    a, b = p.shape[:2]
                    scale = {"original": math.sqrt(max(1, a / b)), None: math.sqrt(max(1, a / b)),
                             "match_rms_adamw": 0.2 * math.sqrt(max(a, b))}.get(g["adjust_lr_fn"], 1.0)
                    new = p if skip is None else p.clone()
                    new.mul_(1 - g["lr"] * g["weight_decay"])
                    new.add_(update.to(p.dtype), alpha=-g["lr"] * scale)
                    if skip is not None:
                        p.copy_(torch.where(skip, p, new))


def ns_dtype_for(device: torch.device) -> torch.dtype:
    """bf16 where matmuls run it natively (CUDA, CPUs with AVX512-BF16 or AMX), else fp32."""
    from .device import cpu_has_bf16

    native = device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16())
    return torch.bfloat16 if native else torch.float32


class MuonAdamW(torch.optim.Optimizer):
    """Muon (torch.optim.Muon's update, ``Muon`` above) on the hidden matrices and torch.optim.AdamW
    on everything else, as one
    optimiser: one lr (Muon's scaled by ``match_rms_adamw``, 0.2 sqrt(max(A, B)), so that its
    updates have AdamW's RMS and the same ``train.lr`` and schedule serve both), one
    ``state_dict`` in the standard layout (Muon's parameters first), so the scheduler,
    checkpoints and resume treat it like AdamW. The param-group dicts are the inner
    optimisers' own, so LambdaLR's lr changes reach both."""

    def __init__(self, model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.95),
                 eps: float = 1e-8, momentum: float = 0.95, ns_dtype: torch.dtype | None = None,
                 fused: bool | None = None):
        chosen = muon_params(model)
        groups = param_groups(model, weight_decay)
        hidden = [p for p in model.parameters() if id(p) in chosen]
        rest = [{**g, "params": [p for p in g["params"] if id(p) not in chosen]} for g in groups]
        rest = [g for g in rest if g["params"]]
        if not hidden:
            raise ValueError("train.optimizer=muon needs linear layers inside the model (Muon updates "
                             "hidden matrices); this model has none: use train.optimizer=adamw")
        self.muon = Muon(hidden, lr=lr, weight_decay=weight_decay, momentum=momentum,
                         adjust_lr_fn="match_rms_adamw", ns_dtype=ns_dtype if ns_dtype is not None
                         else ns_dtype_for(hidden[0].device))
        self.adamw = _adamw_of(rest, lr, betas, eps, fused)
        super().__init__(self.muon.param_groups + self.adamw.param_groups, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("MuonAdamW.step takes no closure")
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        m, a = self.muon.state_dict(), self.adamw.state_dict()
        n = sum(len(g["params"]) for g in m["param_groups"])
        return {"state": {**m["state"], **{k + n: v for k, v in a["state"].items()}},
                "param_groups": m["param_groups"] + [{**g, "params": [i + n for i in g["params"]]}
                                                     for g in a["param_groups"]]}

    def load_state_dict(self, state_dict: dict) -> None:
        k = len(self.muon.param_groups)
        groups = state_dict["param_groups"]
        if len(groups) != k + len(self.adamw.param_groups):
            raise ValueError(f"the saved optimiser has {len(groups)} parameter groups, this one "
                             f"{k + len(self.adamw.param_groups)} (Muon {k} + AdamW); was it saved by "
                             f"another train.optimizer?")
        n = sum(len(g["params"]) for g in groups[:k])
        state = {int(i): v for i, v in state_dict["state"].items()}
        self.muon.load_state_dict({"state": {i: v for i, v in state.items() if i < n}, "param_groups": groups[:k]})
        self.adamw.load_state_dict({"state": {i - n: v for i, v in state.items() if i >= n},
                                    "param_groups": [{**g, "params": [i - n for i in g["params"]]}
                                                     for g in groups[k:]]})
        # Loading replaces the inner optimisers' group dicts: share the new ones again, or the
        # scheduler would set the lr of dicts no optimiser reads any more.
        self.param_groups = self.muon.param_groups + self.adamw.param_groups


def make_optimizer(name: str, model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.95),
                   eps: float = 1e-8, fused: bool | None = None) -> torch.optim.Optimizer:
    """``train.optimizer``: 'adamw' or 'muon' (MuonAdamW); ``fused``: ``train.fused`` for AdamW."""
    if name == "adamw":
        return adamw(model, lr, weight_decay, betas, eps, fused)
    if name == "muon":
        return MuonAdamW(model, lr, weight_decay, betas, eps, fused=fused)
    raise ValueError(f"train.optimizer={name!r} is not valid; valid: {', '.join(OPTIMIZERS)}")


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
