"""The norm axis: RMSNorm against its equation (Zhang & Sennrich 2019, eq. 4), in bf16 too, and
the refusal of a bad eps."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.norm import RMSNorm, layer_norm


def test_rms_norm_is_its_equation():
    torch.manual_seed(0)
    norm = RMSNorm(6, eps=1e-6)
    norm.weight.data = torch.randn(6)
    x = torch.randn(3, 6, dtype=torch.float64)
    want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * norm.weight.double()
    torch.testing.assert_close(norm.double()(x), want)


def test_rms_norm_keeps_bf16_and_computes_in_fp32():
    norm = RMSNorm(4).to(torch.bfloat16)
    x = torch.tensor([[1e-3, 2e-3, -1e-3, 0.0]], dtype=torch.bfloat16)
    y = norm(x)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


@pytest.mark.parametrize("eps", [0, -1e-5, "1e-5", True])
def test_bad_eps_is_refused(eps):
    with pytest.raises((TypeError, ValueError), match="norm.params.eps"):  # a wrong type is a TypeError
        layer_norm(4, eps=eps)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_every_registered_norm_keeps_shape_and_dtype(name):
    """The Norm protocol (nn/norm/base.py): (..., d) -> (..., d) in the input's dtype, for every
    constructor NORMS registers, built with the sizes the builder supplies."""
    from tfamily.nn.norm import NORMS
    norm = NORMS.make(name, {}, d_model=8, bias=False)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(2, 3, 8, dtype=dtype)
        y = norm.to(dtype)(x)
        assert y.shape == x.shape and y.dtype == dtype
