"""Full and causal patterns (Vaswani et al. 2017, section 3.2.3: decoder masking)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import tile_range


@dataclass(frozen=True)
class Full:
    """Every query sees every key (encoder self-attention, cross-attention)."""
    citation = "Vaswani et al. 2017, section 3.2.3: encoder self-attention sees every position"

    name: str = "full"
    causal: bool = False

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return torch.ones_like(q_idx - kv_idx, dtype=torch.bool)

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        return torch.ones(1, qpos.shape[0], kpos.shape[0], dtype=torch.bool, device=qpos.device)


@dataclass(frozen=True)
class Causal:
    """Query i sees keys j <= i (section 3.2.3: prevent leftward information flow)."""
    citation = "Vaswani et al. 2017, section 3.2.3: decoder masking, illegal connections set to -inf"

    name: str = "causal"
    causal: bool = True

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (_, q_hi), (k_lo, _) = tile_range(qpos), tile_range(kpos)
        return (k_lo[None, :] <= q_hi[:, None])[None]
