"""The fused attention-with-log-sum-exp equals its composite reference (SDPA plus a
recomputed log-sum-exp) in both outputs and in the gradients of any loss on both."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels.flash_lse import _FlashLSE, attention_with_lse, reference_attention_with_lse


def _case(dtype, shape=(2, 3, 40, 16), m=56, masked_rows=True):
    b, h, n, e = shape
    q = torch.randn(b, h, n, e, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(b, h, m, e, dtype=dtype, requires_grad=True) for _ in range(2))
    allowed = torch.rand(1, h, n, m) > 0.4
    if masked_rows:
        allowed[:, :, 3] = False   # a row with nothing allowed, as a tile's padding rows
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return q, k, v, mask


def _grads(fn, q, k, v, mask, scale, w_out, w_lse):
    out, lse = fn(q, k, v, mask, scale)
    loss = (out.float() * w_out).sum() + (0.0 if w_lse is None else (lse * w_lse).sum())
    return [out, lse.float(), *torch.autograd.grad(loss, [q, k, v])]


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("with_lse_grad", [True, False])
def test_fused_equals_reference_fp32(scale, with_lse_grad):
    q, k, v, mask = _case(torch.float32)
    w_out = torch.randn(q.shape)
    w_lse = torch.randn(q.shape[:-1]) if with_lse_grad else None
    got = _grads(attention_with_lse, q, k, v, mask, scale, w_out, w_lse)
    ref = _grads(reference_attention_with_lse, q, k, v, mask, scale, w_out, w_lse)
    rows = [j for j in range(q.shape[2]) if j != 3]   # row 3 has no allowed key, so no lse
    got[1], ref[1] = got[1][..., rows], ref[1][..., rows]
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_fused_path_is_the_one_taken_on_cpu(monkeypatch):
    calls = []
    orig = _FlashLSE.apply
    monkeypatch.setattr(_FlashLSE, "apply", lambda *a: calls.append(1) or orig(*a))
    q, k, v, mask = _case(torch.float32)
    attention_with_lse(q, k, v, mask, None)
    attention_with_lse(q, k, v, mask.requires_grad_(), None)   # a mask needing a gradient: composite
    assert calls == [1]


def test_fused_bf16_error_is_of_the_order_of_the_reference():
    q, k, v, mask = _case(torch.bfloat16, masked_rows=False)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    w_out, w_lse = torch.randn(q.shape), torch.randn(q.shape[:-1])
    exact = _grads(reference_attention_with_lse, q32, k32, v32, mask.float(), None, w_out, w_lse)
    ref = _grads(reference_attention_with_lse, q, k, v, mask, None, w_out, w_lse)
    got = _grads(attention_with_lse, q, k, v, mask, None, w_out, w_lse)
    for e, r, g in zip(exact, ref, got):
        ref_err = (r.float() - e).abs().max().item()
        got_err = (g.float() - e).abs().max().item()
        assert got_err <= 2 * ref_err + 1e-2 * e.abs().max().item(), (got_err, ref_err)


def test_without_the_private_ops_the_composite_is_used(monkeypatch):
    import tfamily.nn.kernels.flash_lse as fl
    monkeypatch.setattr(fl, "_FWD", None)
    monkeypatch.setattr(_FlashLSE, "apply", lambda *a: pytest.fail("fused path taken without its op"))
    q, k, v, mask = _case(torch.float32)
    out, lse = attention_with_lse(q, k, v, mask, None)
    ref_out, ref_lse = reference_attention_with_lse(q, k, v, mask, None)
    torch.testing.assert_close(out, ref_out)
