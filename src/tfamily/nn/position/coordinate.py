"""The Universal Transformer's coordinate embedding: position and recurrence step.

Dehghani et al. 2019, eq. 6-7, added to the state before every recurrent step t:
P^t_{pos,2j} = sin(pos / 10000^{2j/d}) + sin(t / 10000^{2j/d}),
P^t_{pos,2j+1} = cos(pos / 10000^{2j/d}) + cos(t / 10000^{2j/d}).
We keep the paper's interleaved sin/cos layout and 1-based steps t = 1..T, and count
positions from 0 like every other position part here (``Sinusoidal``), so that a KV-cached
decode continues at the cached length. tensor2tensor instead concatenates [sin | cos],
counts steps from 0 and by default learns the step signal; we follow the paper.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .absolute import sinusoid_table


class Coordinate(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, x: Tensor, step: int, offset: int = 0) -> Tensor:
        """``x``: (b, n, d) states of positions offset..offset+n-1 entering step ``step`` (>= 1)."""
        if step < 1:
            raise ValueError(f"recurrent steps are counted from 1 (eq. 6-7), got step={step}")
        pos = torch.arange(offset, offset + x.shape[1], device=x.device)
        signal = sinusoid_table(pos, self.d_model) + sinusoid_table(torch.tensor([step], device=x.device),
                                                                    self.d_model)
        return x + signal.to(x.dtype)
