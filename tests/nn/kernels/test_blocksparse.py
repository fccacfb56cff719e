"""The block-sparse gather kernel equals the dense masked reference, in outputs and
gradients, for every pattern in the catalogue, on fresh random inputs."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import KERNELS, BlockSparseKernel, ReferenceKernel, SDPAKernel
from tfamily.nn.kernels.layout import PLANS, get_plan, split
from tfamily.nn.patterns import Causal, FixedBlock, Full, Local1D, SlidingWindow, StridedColumns, dense_mask, longformer
from tfamily.nn.patterns.examples import examples

BLOCK = 16
PATTERNS = examples(80, toys=True)


def _inputs(b, h, h_kv, n, m, e=8, dtype=torch.float32):
    return [torch.randn(b, hh, t, e, dtype=dtype, requires_grad=True) for hh, t in ((h, n), (h_kv, m), (h_kv, m))]


def _run(kernel, q, k, v, pattern, **kw):
    out, _ = kernel(q, k, v, pattern=pattern, **kw)
    grads = torch.autograd.grad(out, [q, k, v] + ([kw["bias"]] if kw.get("bias") is not None else []),
                                torch.ones_like(out) + 0.5 * torch.arange(out.shape[-1]).to(out))
    return out, grads


def _close(a, b, atol, rtol=0.0):
    for x, y in zip(a, b):
        torch.testing.assert_close(x.float(), y.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("n", [64, 77])  # a multiple of the block and not
def test_matches_reference_fp32_outputs_and_gradients(name, n):
    q, k, v = _inputs(2, 4, 2, n, n)
    pattern = PATTERNS[name]
    ref_out, ref_grads = _run(ReferenceKernel(), q, k, v, pattern)
    out, grads = _run(BlockSparseKernel(BLOCK), q, k, v, pattern)
    _close([out, *grads], [ref_out, *ref_grads], atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_matches_reference_bf16_within_tolerance(name):
    # Both kernels round in bf16; the fast path's error against fp32 math on the same
    # inputs must be of the order of the bf16 reference kernel's own error.
    q, k, v = _inputs(1, 4, 4, 70, 70, e=16, dtype=torch.bfloat16)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    pattern = PATTERNS[name]
    exact = _run(ReferenceKernel(), q32, k32, v32, pattern)
    ref = _run(ReferenceKernel(), q, k, v, pattern)
    got = _run(BlockSparseKernel(BLOCK), q, k, v, pattern)
    for e, r, g in zip([exact[0], *exact[1]], [ref[0], *ref[1]], [got[0], *got[1]]):
        ref_err = (r.float() - e).abs().max().item()
        got_err = (g.float() - e).abs().max().item()
        assert got_err <= 2 * ref_err + 2e-2 * e.abs().max().item(), (got_err, ref_err)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("name", ["sliding_window", "strided_merged", "fixed_heads", "bigbird", "local_2d"])
def test_matches_reference_with_offset_padding_and_bias(name, with_bias):
    # Queries 30..79 over 80 keys (a cache or XL memory), padded keys, an additive bias.
    n, m = 50, 80
    q, k, v = _inputs(2, 4, 2, n, m)
    bias = torch.randn(1, 4, n, m, requires_grad=True) if with_bias else None
    pad = torch.rand(2, m) > 0.3
    kw = dict(q_offset=m - n, key_padding=pad, bias=bias)
    pattern = PATTERNS[name]
    ref_out, ref_grads = _run(ReferenceKernel(), q, k, v, pattern, **kw)
    out, grads = _run(BlockSparseKernel(BLOCK), q, k, v, pattern, **kw)
    _close([out, *grads], [ref_out, *ref_grads], atol=5e-5, rtol=1e-4)


def test_short_query_uses_dense_path_and_matches_reference():
    q, k, v = _inputs(1, 2, 2, 3, 90)
    pattern = PATTERNS["bigbird"]
    ref = _run(ReferenceKernel(), q, k, v, pattern, q_offset=87)
    got = _run(BlockSparseKernel(BLOCK), q, k, v, pattern, q_offset=87)
    _close([got[0], *got[1]], [ref[0], *ref[1]], atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("name", [n for n, p in PATTERNS.items() if p.causal])
def test_causal_patterns_never_read_the_future(name):
    pattern = PATTERNS[name]
    q, k, v = (t.detach() for t in _inputs(1, 4, 4, 80, 80))
    out, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=pattern)
    t = 45
    k2, v2 = k.clone(), v.clone()
    k2[:, :, t + 1:] = torch.randn_like(k2[:, :, t + 1:])
    v2[:, :, t + 1:] = torch.randn_like(v2[:, :, t + 1:])
    out2, _ = BlockSparseKernel(BLOCK)(q, k2, v2, pattern=pattern)
    torch.testing.assert_close(out[:, :, :t + 1], out2[:, :, :t + 1])
    assert not dense_mask(pattern, 80, 80, n_heads=4).triu(1).any()


def test_plan_is_cached_per_shape_and_rebuilt_for_a_new_length():
    pattern = SlidingWindow(11)
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 96, 96))
    kernel = BlockSparseKernel(BLOCK)
    kernel(q, k, v, pattern=pattern)
    builds = PLANS.builds
    kernel(q, k, v, pattern=pattern)
    BlockSparseKernel(BLOCK)(q, k, v, pattern=SlidingWindow(11))  # an equal pattern shares it
    assert PLANS.builds == builds
    kernel(q[:, :, :80], k[:, :, :80], v[:, :, :80], pattern=pattern)
    assert PLANS.builds == builds + 1


@pytest.mark.parametrize("pattern", [SlidingWindow(32), Local1D(32, 32), longformer(32, 4)])
def test_work_and_plan_memory_grow_linearly_in_length(pattern):
    # Gathered key slots per query (the plan's work and its mask memory) stay constant
    # as L doubles, and far below L.
    def slots(n):
        total = 0
        for qo, parts in split(pattern):
            plan = get_plan(parts, qo, n, n, 0, BLOCK, None, torch.device("cpu"))
            total += sum(bk.scores for bk in plan.buckets)
        return total / n
    assert slots(1024) <= 1.05 * slots(512) <= 0.2 * 512


def test_refuses_weights_and_bad_block_size():
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 32, 32))
    with pytest.raises(ValueError, match="reference"):
        BlockSparseKernel(BLOCK)(q, k, v, pattern=SlidingWindow(4), need_weights=True)
    with pytest.raises(ValueError, match="block_size"):
        BlockSparseKernel(0)
    assert KERNELS["blocksparse"] is BlockSparseKernel


@pytest.mark.parametrize("pattern", [FixedBlock(BLOCK), StridedColumns(4)])
def test_band_and_causal_diagonal_layouts_match_reference(pattern):
    # FixedBlock(B): every tile sees only itself, lower-triangular (SDPA's is_causal path).
    # StridedColumns(4) at 64: residue runs of 16 = one tile each, also a causal diagonal.
    q, k, v = _inputs(2, 4, 4, 64, 64)
    (qo, parts), = split(pattern)
    plan = get_plan(parts, qo, 64, 64, 0, BLOCK, None, torch.device("cpu"))
    assert all(bk.band is not None and bk.causal_diagonal for bk in plan.buckets)
    ref_out, ref_grads = _run(ReferenceKernel(), q, k, v, pattern)
    out, grads = _run(BlockSparseKernel(BLOCK), q, k, v, pattern)
    _close([out, *grads], [ref_out, *ref_grads], atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("pattern", [Full(), Causal()])
def test_full_and_causal_are_handed_to_fused_sdpa(pattern):
    # Cross-attention (Full) in an encoder-decoder built with kernel=blocksparse must not
    # gather every key tile for every query tile.
    q, k, v = (t.detach() for t in _inputs(2, 4, 2, 40, 56))
    pad = torch.rand(2, 56) > 0.2
    out, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=pattern, q_offset=16, key_padding=pad)
    ref, _ = SDPAKernel()(q, k, v, pattern=pattern, q_offset=16, key_padding=pad)
    assert torch.equal(out, ref)


def test_auto_block_size_picks_a_tile_by_cost_and_matches_reference():
    from tfamily.nn.kernels.layout import AUTO_BLOCKS, AUTO_BLOCKS_COMPILED, _BEST
    pattern = Local1D(block=200, memory=100)
    q, k, v = _inputs(1, 2, 2, 300, 300)
    ref = _run(ReferenceKernel(), q, k, v, pattern)
    got = _run(BlockSparseKernel("auto"), q, k, v, pattern)
    _close([got[0], *got[1]], [ref[0], *ref[1]], atol=5e-5, rtol=1e-4)
    chosen = [(key, b) for key, b in _BEST.items() if key[0] == (pattern,) and key[2] == 300]
    assert chosen and chosen[0][1] in AUTO_BLOCKS + AUTO_BLOCKS_COMPILED
    # The pick is the cheapest candidate plan by the cost model.
    (parts, order, n, m, q_offset, heads, device, fold, engine), pick = chosen[0]
    from tfamily.nn.kernels.layout import AUTO_SIZES, build_plan, plan_cost
    costs = {b: plan_cost(build_plan(parts, order, n, m, q_offset, b, heads, device), fold, engine)
             for b in AUTO_SIZES[engine] if b <= max(n, 64)}
    assert pick == min(costs, key=costs.get)
    chosen = [b for _, b in chosen]
    # Only the chosen tile size's plan stays cached (the others were built to be costed).
    cached = [key[5] for key in PLANS._plans if key[0] == (pattern,) and key[2] == 300]
    assert cached == [chosen[0]]
    with pytest.raises((TypeError, ValueError), match="auto"):  # a word is a TypeError, 0 a ValueError
        BlockSparseKernel("big")


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_float64_is_float64_with_finite_gradients(name, padded):
    # Issue 13.3: unions merged by log-sum-exp (strided merged, dilated longformer) gave NaN
    # gradients in fp64, from rows that see nothing in one part; fp64 must also stay fp64.
    torch.manual_seed(sum(map(ord, name)) + padded)
    q, k, v = _inputs(2, 4, 2, 77, 77, dtype=torch.float64)
    pad = None
    if padded:  # left padding: the first queries of row 1 see no key at all
        pad = torch.ones(2, 77, dtype=torch.bool)
        pad[1, :9] = False
    pattern = PATTERNS[name]
    ref_out, ref_grads = _run(ReferenceKernel(), q, k, v, pattern, key_padding=pad)
    out, grads = _run(BlockSparseKernel(BLOCK), q, k, v, pattern, key_padding=pad)
    assert out.dtype == torch.float64
    for got, want in zip([out, *grads], [ref_out, *ref_grads]):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
