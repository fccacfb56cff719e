"""LayerNorm and RMSNorm, the two choices of the norm axis.

LayerNorm (Ba et al. 2016, eq. 4): y = (x - mean(x)) / sqrt(var(x) + eps) * g + b.
RMSNorm (Zhang & Sennrich 2019, eq. 4): y = x / sqrt(mean(x^2) + eps) * g; no centring and
no bias, which it argues costs nothing in accuracy and saves the mean's pass.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ...base.numbers import check_number


def _check_eps(eps: object) -> float:
    return check_number("norm.params.eps", eps, 0.0, 1.0, lo_open=True, hi_open=True,
                        hint="e.g. 1e-5 (GPT-2), 1e-6 (Llama)")


def layer_norm(d_model: int, bias: bool = True, eps: float = 1e-5) -> nn.LayerNorm:
    return nn.LayerNorm(d_model, eps=_check_eps(eps), bias=bias)


class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019, eq. 4, computed in fp32 at least and cast back before the gain,
    as Llama's reference code does (a bf16 mean of squares loses the small features)."""
    citation = "Zhang & Sennrich 2019, eq. 4: x / RMS(x) * g, LayerNorm without the mean and the bias"

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = _check_eps(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (..., d) -> (..., d)."""
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rms_norm(d_model: int, bias: bool = True, eps: float = 1e-6) -> RMSNorm:
    """``bias`` is accepted and unused: RMSNorm has no bias (section 3)."""
    return RMSNorm(d_model, eps)
