"""LoRA (Hu et al. 2021): a frozen weight plus a trained low-rank update,
W' = W + (alpha / r) B A with A (r, d_in), B (d_out, r).

Section 4.1: A starts Gaussian and B at zero, so W' = W at the start (bit for bit: W + 0),
and only A and B train; the update folds into W afterwards (``merge``), so the merged model
runs at the original cost with no adapter left.

The update lives in the weight itself, through ``torch.nn.utils.parametrize``, and not in a
wrapper's forward (as peft's ``LoraLayer`` does): parts here read a projection's weight
directly, e.g. ``QKVProjection`` slices the query and key/value rows of ``qkv_proj.weight``
for XL memory and cross-attention, and a forward-only adapter would be skipped there. So
tfamily uses this small part rather than peft, and needs no extra dependency.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..base.numbers import check_int, check_number


class LowRankUpdate(nn.Module):
    """The parametrization ``W -> W + (alpha / rank) B A`` of a (d_out, d_in) weight."""

    def __init__(self, d_out: int, d_in: int, rank: int, alpha: float):
        super().__init__()
        self.rank = check_int("lora.rank", rank, 1, min(d_out, d_in),
                              hint="a rank below the layer's sizes, e.g. 8")
        self.scale = check_number("lora.alpha", alpha, 0.0, lo_open=True, hint="e.g. 16") / rank
        # Hu et al. 2021, section 4.1: random Gaussian A, zero B (Kaiming-uniform A, as their code does).
        self.lora_a = nn.Parameter(torch.empty(rank, d_in))
        self.lora_b = nn.Parameter(torch.zeros(d_out, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, weight: Tensor) -> Tensor:
        return weight + self.scale * (self.lora_b @ self.lora_a).to(weight.dtype)


def targets_of(model: nn.Module, targets: tuple[str, ...]) -> list[tuple[str, nn.Linear]]:
    """The ``nn.Linear`` layers whose qualified name is one of ``targets`` or ends with
    ``.<target>`` (``qkv_proj`` matches every block's ``attn.proj.qkv_proj``)."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)
            and any(name == t or name.endswith("." + t) for t in targets)]


def add_lora(model: nn.Module, rank: int, alpha: float, targets: tuple[str, ...]) -> list[str]:
    """Give every target linear of ``model`` a low-rank update; returns their names."""
    found = targets_of(model, targets)
    if not found:
        linears = sorted({n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
        raise ValueError(f"lora.targets {list(targets)} match no linear layer of this model; layers end with: "
                         f"{', '.join(linears)}")
    for _, linear in found:
        d_out, d_in = linear.weight.shape
        update = LowRankUpdate(d_out, d_in, rank, alpha).to(linear.weight.device)
        parametrize.register_parametrization(linear, "weight", update)
    return [name for name, _ in found]


def is_adapter(name: str) -> bool:
    """Whether the parameter ``name`` is a LoRA factor."""
    return name.endswith((".lora_a", ".lora_b"))


def merge(model: nn.Module) -> nn.Module:
    """Fold every low-rank update into its weight, in place: plain linears with W + (alpha/r) B A."""
    for m in model.modules():
        if parametrize.is_parametrized(m, "weight"):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    return model
