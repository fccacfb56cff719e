"""ReferenceKernel against the definition itself, one query at a time (Vaswani et al.
2017, eq. 1: softmax(q K^T / sqrt(d_k)) V over the keys the pattern allows)."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.kernels import ReferenceKernel
from tfamily.nn.patterns import Causal, Full


def _loop_attention(q, k, v, allowed, bias=None, scale=None):
    """Scalar-by-scalar attention: for each (b, h, i), a softmax over allowed keys."""
    b, h, n, e = q.shape
    group = h // k.shape[1]
    scale = 1 / math.sqrt(e) if scale is None else scale
    out = torch.zeros(b, h, n, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(n):
                keys = [j for j in range(k.shape[2]) if allowed(bi, hi, i, j)]
                if not keys:
                    continue  # no visible key: output 0
                s = torch.stack([(q[bi, hi, i] * k[bi, hi // group, j]).sum() * scale
                                 + (bias[bi % bias.shape[0], hi % bias.shape[1], i, j] if bias is not None else 0)
                                 for j in keys])
                w = torch.softmax(s.double(), 0)
                out[bi, hi, i] = sum(w[t] * v[bi, hi // group, j].double() for t, j in enumerate(keys))
    return out


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_reference_matches_definition(h_kv):
    b, h, n, m, e = 2, 4, 3, 6, 5
    q, k, v = torch.randn(b, h, n, e), torch.randn(b, h_kv, m, e), torch.randn(b, h_kv, m, e)
    pad = torch.ones(b, m, dtype=torch.bool)
    pad[1, 4:] = False
    bias = torch.randn(1, h, n, m)
    q_offset = m - n
    out, w = ReferenceKernel()(q, k, v, pattern=Causal(), q_offset=q_offset, key_padding=pad, bias=bias,
                               need_weights=True)
    expect = _loop_attention(q, k, v, lambda bi, hi, i, j: j <= q_offset + i and pad[bi, j], bias)
    torch.testing.assert_close(out.double(), expect, atol=1e-5, rtol=1e-5)
    assert w.shape == (b, h, n, m)
    torch.testing.assert_close(w.sum(-1), torch.ones(b, h, n))
    assert (w[1, :, :, 4:] == 0).all()  # padded keys get no weight
    assert (w.triu(diagonal=q_offset + 1) == 0).all()  # nor do future keys


def test_full_pattern_and_scale():
    q, k, v = torch.randn(1, 2, 4, 3), torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3)
    out, w = ReferenceKernel()(q, k, v, pattern=Full(), scale=0.25)
    assert w is None
    expect = _loop_attention(q, k, v, lambda *_: True, scale=0.25)
    torch.testing.assert_close(out.double(), expect, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero_with_no_nan_gradients():
    q = torch.randn(1, 2, 4, 3, requires_grad=True)
    k = torch.randn(1, 2, 4, 3, requires_grad=True)
    v = torch.randn(1, 2, 4, 3, requires_grad=True)
    pad = torch.tensor([[False, False, True, True]])  # left padding: queries 0 and 1 see nothing
    out, _ = ReferenceKernel()(q, k, v, pattern=Causal(), key_padding=pad)
    assert (out[:, :, :2] == 0).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, :, :2] == 0).all()
    assert (v.grad[:, :, :2] == 0).all()  # padded values never contribute


def test_dropout_only_in_training_call():
    q, k, v = torch.randn(1, 1, 8, 4), torch.randn(1, 1, 8, 4), torch.randn(1, 1, 8, 4)
    a, _ = ReferenceKernel()(q, k, v, pattern=Full())
    b, _ = ReferenceKernel()(q, k, v, pattern=Full(), dropout_p=0.5)
    assert not torch.allclose(a, b)


def _naive64(q, k, v, allowed, bias):
    """softmax(q k^T / sqrt(e) + bias) v written out in fp64 (exp / sum), no library softmax."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    s = s.masked_fill(~allowed, -math.inf)
    top = s.amax(-1, keepdim=True).clamp_min(-1e300)
    w = torch.exp(s - top)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    return w @ v


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n,h_kv", [(5, 4), (17, 2), (33, 1)])
def test_float64_reaches_float64_precision(seed, n, h_kv):
    # The library's ground truth must not round through fp32 (issue 13.3): fp32 rounding
    # would leave errors near 1e-7 here.
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, n, 8, generator=g, dtype=torch.float64) * 3
    k, v = (torch.randn(2, h_kv, n, 8, generator=g, dtype=torch.float64) * 3 for _ in range(2))
    bias = torch.randn(1, 4, n, n, generator=g, dtype=torch.float64)
    out, w = ReferenceKernel()(q, k, v, pattern=Causal(), bias=bias, need_weights=True)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    assert out.dtype == w.dtype == torch.float64
    torch.testing.assert_close(out, _naive64(q, k, v, allowed, bias), atol=1e-12, rtol=1e-12)


def test_float64_gradcheck_on_tiny_sizes():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[True, False, True, True]])

    def f(q, k, v, bias):
        return ReferenceKernel()(q, k, v, pattern=Causal(), key_padding=pad, bias=bias)[0]
    assert torch.autograd.gradcheck(f, (q, k, v, bias), eps=1e-6, atol=1e-8, rtol=1e-6)
