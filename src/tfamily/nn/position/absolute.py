"""Absolute positions added to the token embeddings.

Sinusoidal: Vaswani et al. 2017, section 3.5:
PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
Computed for any length, so it has no table limit. Learned: a table of
``max_len`` vectors (Gehring et al. 2017, as compared in section 3.5).
"""
from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor, nn


class InputPosition(Protocol):
    def __call__(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """``x``: (b, n, d) embeddings of positions offset..offset+n-1; returns x with positions.
        ``offset`` may be a (b,) integer tensor, one start per row (the Universal Transformer's
        randomized offsets, drawn per example: ``repro/ut_algorithmic.py``)."""


def positions(offset: int | Tensor, n: int, device) -> Tensor:
    """(n,) positions offset..offset+n-1, or (b, n) for a (b,) tensor of row offsets. A row's
    offset is negative when its prompt is left-padded (batched prompts of different lengths):
    the padding's positions are clamped to 0, and attention never reads those entries."""
    steps = torch.arange(n, device=device)
    if not isinstance(offset, Tensor):
        return steps + offset
    if offset.dim() != 1 or offset.dtype.is_floating_point or offset.dtype == torch.bool:
        raise ValueError(f"row offsets must be a (batch,) integer tensor, got {offset.dtype} of shape "
                         f"{tuple(offset.shape)}")
    return (offset.to(device)[:, None] + steps).clamp_min(0)


def sinusoid_table(positions: Tensor, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(...) -> (..., d_model)`` sinusoids; odd d_model drops the last cosine. Computed in
    ``dtype`` when it is wider than fp32 (fp64 models get fp64 angles), else in fp32."""
    acc = torch.promote_types(dtype, torch.float32)
    i = torch.arange(0, d_model, 2, device=positions.device, dtype=acc)
    inv_freq = torch.exp(-math.log(10000.0) * i / d_model)
    ang = positions.to(acc)[..., None] * inv_freq
    pe = torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2)
    return pe[..., :d_model]


class Sinusoidal(nn.Module):
    citation = "Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model))"

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        return x + sinusoid_table(positions(offset, x.shape[1], x.device), self.d_model, x.dtype).to(x.dtype)


class Learned(nn.Module):
    citation = "Gehring et al. 2017 learned positions, compared in Vaswani et al. 2017, section 3.5"

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        # Same per-dimension scale as the tokens it is added to (TokenEmbedding multiplies by
        # sqrt(d_model), giving std 1) and as the sinusoids; GPT/BERT's std 0.02 assumes
        # unscaled 0.02 token embeddings and here would leave order invisible for hundreds of steps.
        nn.init.normal_(self.table.weight, std=1.0)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        first = (int(offset.max()) if offset.numel() else 0) if isinstance(offset, Tensor) else int(offset)
        end = first + x.shape[1]
        if end > self.max_len:
            raise ValueError(f"sequence reaches position {end} but the learned position table has "
                             f"max_len={self.max_len}; shorten the input or raise position.max_len")
        if isinstance(offset, Tensor):
            return x + self.table(positions(offset, x.shape[1], x.device)).to(x.dtype)
        return x + self.table.weight[offset:end].to(x.dtype)


class NoPosition(nn.Module):
    """Order comes from elsewhere (relative or rotary attention, or recurrence)."""
    citation = ("Dai et al. 2019, section 3.3: no absolute positions at the input; order enters attention as relative "
                "distance")

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        return x
