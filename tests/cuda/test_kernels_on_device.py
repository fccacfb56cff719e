"""Every attention kernel equals the dense reference on the device, in outputs and in q, k, v
and bias gradients: grouped-query heads, padded keys, a query offset (a cache or XL memory)
and an additive bias, at a length off the tile grid.

On CUDA: blocksparse over the whole pattern catalogue at block 128, flex at block 128 on a
few patterns (each compiles for ~10 s; ``scripts/cuda_kernel_check.py`` runs the catalogue),
SDPA on every masking case it branches on, and the reference itself against fp64 on the CPU.
On the CPU the same cases run at block 16 and a handful of patterns; flex is skipped there
(CPU FlexAttention is forward-only; tests/nn/kernels/test_flex.py covers its forward)."""
from __future__ import annotations

import pytest
import torch

from tests.nn.kernels.test_blocksparse import _close, _run
from tests.nn.kernels.test_sdpa import CASES, H
from tfamily.nn.kernels import BlockSparseKernel, FlexKernel, ReferenceKernel, SDPAKernel
from tfamily.nn.patterns.examples import examples

CUDA = torch.cuda.is_available()
# FlexAttention's GPU kernels need tiles of 128 (nn/kernels/flex.py), and >= 2 of them per side.
N, BLOCK = (300, 128) if CUDA else (80, 16)
PATTERNS = examples(N, toys=True)
SPARSE = list(PATTERNS) if CUDA else ["sliding_window", "bigbird", "strided_merged", "mixed_heads"]
FLEX = ["sliding_window", "bigbird", "local_1d", "strided_merged"]  # a window, a union, a reordered one
TOL = dict(atol=2e-4, rtol=2e-4)


def _inputs(device, n, m, *, h=4, h_kv=2, e=32, dtype=torch.float32, padding=True, bias_shape=None, seed=0):
    """q, k, v (and bias) drawn on the CPU, so every device sees the same numbers."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, h, n, e), (2, h_kv, m, e), (2, h_kv, m, e)] + ([bias_shape] if bias_shape else [])
    leaves = [torch.randn(s, generator=g).to(device, dtype).requires_grad_() for s in shapes]
    pad = (torch.rand(2, m, generator=g) > 0.2).to(device) if padding else None
    q, k, v, *bias = leaves
    return q, k, v, dict(key_padding=pad, bias=bias[0] if bias else None)


def _equals_reference(kernel, pattern, device, n, m, q_offset=0, **kw):
    q, k, v, extra = _inputs(device, n, m, **kw)
    got = _run(kernel, q, k, v, pattern, q_offset=q_offset, **extra)
    want = _run(ReferenceKernel(), q, k, v, pattern, q_offset=q_offset, **extra)
    _close([got[0], *got[1]], [want[0], *want[1]], **TOL)


@pytest.mark.parametrize("name", SPARSE)
def test_blocksparse_equals_reference(name, device):
    _equals_reference(BlockSparseKernel(BLOCK), PATTERNS[name], device, N, N)


@pytest.mark.parametrize("name", ["bigbird", "strided_merged", "mixed_heads"])
def test_blocksparse_with_offset_padding_and_bias_equals_reference(name, device):
    _equals_reference(BlockSparseKernel(BLOCK), PATTERNS[name], device, N - 40, N, q_offset=40,
                      bias_shape=(1, 4, N - 40, N))


@pytest.mark.skipif(not CUDA, reason="CPU FlexAttention is forward-only (tests/nn/kernels/test_flex.py)")
@pytest.mark.parametrize("name", FLEX)
def test_flex_at_block_128_equals_reference(name, device):
    _equals_reference(FlexKernel(128), PATTERNS[name], device, N, N)


@pytest.mark.skipif(not CUDA, reason="CPU FlexAttention is forward-only (tests/nn/kernels/test_flex.py)")
def test_flex_with_offset_padding_and_bias_equals_reference(device):
    _equals_reference(FlexKernel(128), PATTERNS["bigbird"], device, N - 40, N, q_offset=40,
                      bias_shape=(1, 4, N - 40, N))


@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_equals_reference(case, device):
    pattern, n, m, q_offset, padding, bias_shape = CASES[case]
    _equals_reference(SDPAKernel(), pattern, device, n, m, q_offset, h=H, padding=padding, bias_shape=bias_shape)


def test_sdpa_in_bf16_is_as_close_to_fp32_as_the_reference_in_bf16(device):
    """At a length where CUDA picks its flash kernel: its bf16 error against fp32 maths is
    of the order of the bf16 reference kernel's own."""
    pattern, n = CASES["causal"][0], 256
    q, k, v, _ = _inputs(device, n, n, padding=False, e=64, dtype=torch.bfloat16)
    exact = _run(ReferenceKernel(), *(t.detach().float().requires_grad_() for t in (q, k, v)), pattern)
    ref, got = _run(ReferenceKernel(), q, k, v, pattern), _run(SDPAKernel(), q, k, v, pattern)
    for e, r, g in zip([exact[0], *exact[1]], [ref[0], *ref[1]], [got[0], *got[1]]):
        ref_err, got_err = ((t.float() - e).abs().max().item() for t in (r, g))
        assert got_err <= 2 * ref_err + 1e-2 * e.abs().max().item(), (got_err, ref_err)


def test_reference_on_the_device_equals_fp64_on_the_cpu(device):
    pattern = PATTERNS["bigbird"]
    q, k, v, extra = _inputs(device, N - 40, N, bias_shape=(1, 4, N - 40, N))
    got = _run(ReferenceKernel(), q, k, v, pattern, q_offset=40, **extra)
    cpu = [t.detach().cpu().double().requires_grad_() for t in (q, k, v, extra["bias"])]
    want = _run(ReferenceKernel(), *cpu[:3], pattern, q_offset=40, key_padding=extra["key_padding"].cpu(),
                bias=cpu[3])
    _close([got[0].cpu(), *(t.cpu() for t in got[1])], [want[0], *want[1]], atol=1e-4, rtol=1e-4)
