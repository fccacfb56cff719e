"""SDPAKernel equals the dense ReferenceKernel in outputs and in q/k/v gradients on
fresh random inputs, for every masking case the kernel branches on; grouped-query
K/V are broadcast, never copied per query head."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import KERNELS, ReferenceKernel, SDPAKernel
from tfamily.nn.kernels import fused_blocks
from tfamily.nn.patterns import Causal, Full

B, H, E = 2, 8, 16

# name -> (pattern, n, m, q_offset, padding?, bias shape or None)
CASES = {
    "full": (Full(), 7, 7, 0, False, None),
    "causal": (Causal(), 7, 7, 0, False, None),
    "padding": (Full(), 7, 7, 0, True, None),
    "causal+padding": (Causal(), 7, 7, 0, True, None),
    "decode-1": (Causal(), 1, 9, 8, False, None),
    "decode-chunk": (Causal(), 3, 9, 6, False, None),
    "decode-chunk+padding": (Causal(), 3, 9, 6, True, None),
    "cross-shape": (Full(), 4, 9, 0, True, None),
    "bias": (Full(), 7, 7, 0, False, (1, H, 7, 7)),
    "causal+bias": (Causal(), 7, 7, 0, False, (B, 1, 7, 7)),
    "causal+padding+bias": (Causal(), 7, 7, 0, True, (1, H, 7, 7)),
    "decode-chunk+bias": (Causal(), 3, 9, 6, False, (1, H, 3, 9)),
}


def _inputs(n, m, h_kv, dtype, padding, bias_shape, left_pad=False):
    g = torch.Generator().manual_seed(1234 + n * 31 + m * 7 + h_kv)
    q = torch.randn(B, H, n, E, generator=g)
    k = torch.randn(B, h_kv, m, E, generator=g)
    v = torch.randn(B, h_kv, m, E, generator=g)
    pad = None
    if padding:
        pad = torch.ones(B, m, dtype=torch.bool)
        if left_pad:
            pad[1, :3] = False  # the first queries of row 1 then see no real key at all
        else:
            pad[1, m - 3:] = False
    bias = torch.randn(*bias_shape, generator=g) if bias_shape else None
    to = lambda t: t.to(dtype).requires_grad_()  # noqa: E731
    return to(q), to(k), to(v), pad, (bias.to(dtype) if bias is not None else None)


def _run(kernel, q, k, v, **kw):
    out, _ = kernel(q, k, v, **kw)
    grad = torch.randn_like(out, dtype=torch.float32, generator=torch.Generator().manual_seed(7))
    (out.float() * grad).sum().backward()
    return out.detach().float(), [t.grad.float() for t in (q, k, v)]


def _compare(case, h_kv, dtype, atol, left_pad=False):
    pattern, n, m, q_offset, padding, bias_shape = CASES[case]
    q, k, v, pad, bias = _inputs(n, m, h_kv, dtype, padding, bias_shape, left_pad)
    kw = dict(pattern=pattern, q_offset=q_offset, key_padding=pad, bias=bias)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref_out, ref_grads = _run(ReferenceKernel(), q32, k32, v32,
                              **{**kw, "bias": bias.float() if bias is not None else None})
    out, grads = _run(SDPAKernel(), q, k, v, **kw)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_out, atol=atol, rtol=atol)
    for name, g, rg in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(g, rg, atol=atol, rtol=atol, msg=lambda s: f"d{name}: {s}")


@pytest.mark.parametrize("h_kv", [8, 2, 1])
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_equals_reference_fp32(case, h_kv):
    _compare(case, h_kv, torch.float32, atol=1e-5)


@pytest.mark.parametrize("case", ["full", "causal", "causal+padding", "decode-chunk", "causal+bias"])
@pytest.mark.parametrize("h_kv", [8, 2])
def test_sdpa_equals_reference_bf16(case, h_kv):
    _compare(case, h_kv, torch.bfloat16, atol=2e-2)


@pytest.mark.parametrize("case", ["causal+padding", "causal+padding+bias", "padding"])
def test_fully_masked_query_rows_match_reference(case):
    # Left padding with a causal pattern leaves the first queries with no visible key;
    # both kernels must return zeros there (not NaN, not an average) and agree elsewhere.
    _compare(case, 2, torch.float32, atol=1e-5, left_pad=True)
    pattern, n, m, q_offset, padding, bias_shape = CASES[case]
    q, k, v, pad, bias = _inputs(n, m, 2, torch.float32, padding, bias_shape, left_pad=True)
    if case == "padding":  # a whole batch row of padding
        pad[1] = False
    out, _ = SDPAKernel()(q, k, v, pattern=pattern, key_padding=pad, bias=bias)
    assert torch.isfinite(out).all()
    if case == "padding":
        assert (out[1] == 0).all()
    else:
        assert (out[1, :, :3] == 0).all()


def test_scale_is_honoured():
    q, k, v, _, _ = _inputs(5, 5, 2, torch.float32, False, None)
    a, _ = SDPAKernel()(q, k, v, pattern=Causal(), scale=0.3)
    b, _ = ReferenceKernel()(q, k, v, pattern=Causal(), scale=0.3)
    c, _ = SDPAKernel()(q, k, v, pattern=Causal())
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a, c, atol=1e-3)


@pytest.mark.parametrize("case", ["causal", "padding", "decode-chunk", "causal+bias"])
def test_gqa_never_materialises_repeated_kv(case, monkeypatch):
    pattern, n, m, q_offset, padding, bias_shape = CASES[case]
    q, k, v, pad, bias = _inputs(n, m, 1, torch.float32, padding, bias_shape)
    kv_storage = {k.untyped_storage().data_ptr(), v.untyped_storage().data_ptr()}

    def guard(original):
        def call(self, *args, **kwargs):
            if self.untyped_storage().data_ptr() in kv_storage:
                raise AssertionError(f"SDPA kernel copied K/V per query head ({original.__name__})")
            return original(self, *args, **kwargs)
        return call

    # Python-level copies of K/V (a view via expand is fine only if nothing then copies it).
    for name in ("repeat_interleave", "repeat", "tile", "expand", "contiguous", "clone"):
        monkeypatch.setattr(torch.Tensor, name, guard(getattr(torch.Tensor, name)))
    for name in ("repeat_interleave", "tile"):
        monkeypatch.setattr(torch, name, guard(getattr(torch, name)))
    # ... and copies inside the fused call, which only the profiler sees.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, _ = SDPAKernel()(q, k, v, pattern=pattern, q_offset=q_offset, key_padding=pad, bias=bias)
    ops = {e.name for e in prof.events()}
    assert not ops & {"aten::repeat_interleave", "aten::repeat", "aten::tile"}, sorted(ops)
    assert out.shape == (B, H, n, E)
    # The guard is live: the reference kernel does copy K/V per head.
    with pytest.raises(AssertionError, match="copied"):
        ReferenceKernel()(q, k, v, pattern=pattern, q_offset=q_offset, key_padding=pad, bias=bias)
    monkeypatch.undo()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(8, 1), v)
    assert "aten::repeat_interleave" in {e.name for e in prof.events()}


def test_sdpa_refuses_need_weights():
    q, k, v, _, _ = _inputs(3, 3, 8, torch.float32, False, None)
    with pytest.raises(ValueError, match="reference"):
        SDPAKernel()(q, k, v, pattern=Full(), need_weights=True)


def test_registry_names_match():
    for name, ctor in KERNELS.items():
        assert ctor().name == name


# -- attention-probability dropout on CPU: the compiled block kernel instead of SDPA's math path --

def _dropout_inputs(n=160, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 4, n, 16, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.skipif(fused_blocks.usable(torch.zeros(1)) is None, reason="compiled CPU kernels not built")
@pytest.mark.parametrize("pattern", [Causal(), Full()], ids=["causal", "full"])
def test_sdpa_dropout_on_cpu_is_seeded_unbiased_and_causal(pattern):
    kernel = SDPAKernel()
    q, k, v = _dropout_inputs()
    plain = kernel(q, k, v, pattern=pattern)[0]
    torch.manual_seed(5)
    a = kernel(q, k, v, pattern=pattern, dropout_p=0.3)[0]
    torch.manual_seed(5)
    b = kernel(q, k, v, pattern=pattern, dropout_p=0.3)[0]
    assert torch.equal(a, b) and not torch.allclose(a, plain)  # seeded by torch's generator, and it drops
    mean = sum(kernel(q, k, v, pattern=pattern, dropout_p=0.3)[0] for _ in range(300)) / 300
    assert (mean - plain).abs().mean() < 0.1 * plain.abs().mean()  # inverted dropout keeps the expectation
    if isinstance(pattern, Causal):  # a changed future key leaves earlier rows unchanged, mask for mask
        k2, v2 = k.clone(), v.clone()
        k2[:, :, 100:] += 1.0
        v2[:, :, 100:] -= 1.0
        torch.manual_seed(9)
        c = kernel(q, k, v, pattern=pattern, dropout_p=0.3)[0]
        torch.manual_seed(9)
        d = kernel(q, k2, v2, pattern=pattern, dropout_p=0.3)[0]
        assert torch.equal(c[:, :, :100], d[:, :, :100]) and not torch.equal(c[:, :, 100:], d[:, :, 100:])


@pytest.mark.parametrize("case", ["causal", "padding", "causal+bias", "decode-chunk"])
def test_cpu_half_short_rows_run_in_float32(case):
    """Short bf16 rows on CPU go through fp32 SDPA (faster there, and more precise): outputs and
    gradients equal fp32 SDPA on the same bf16 values, cast back, bit for bit; under autocast too."""
    pattern, n, m, off, padding, bias_shape = CASES[case]
    q, k, v, pad, bias = _inputs(n, m, H, torch.float32, padding, bias_shape)
    half = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    wide = [t.detach().float().requires_grad_() for t in half]
    bias16 = bias.bfloat16() if bias is not None else None
    ctx = dict(pattern=pattern, q_offset=off, key_padding=pad)
    got, _ = SDPAKernel()(*half, bias=bias16, **ctx)
    want, _ = SDPAKernel()(*wide, bias=bias16.float() if bias16 is not None else None, **ctx)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want.bfloat16())
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(5))
    got.float().mul(w).sum().backward()
    want.bfloat16().float().mul(w).sum().backward()
    for a, b in zip(half, wide):
        assert torch.equal(a.grad, b.grad.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        again, _ = SDPAKernel()(*[t.detach() for t in half], bias=bias16, **ctx)
    assert torch.equal(again, got.detach())
