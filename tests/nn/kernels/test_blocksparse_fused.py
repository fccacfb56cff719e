"""The compiled block-sparse kernel (fused_blocks.py, csrc/blocksparse.cpp) against the PyTorch
path of blocksparse.py (gathered tiles + SDPA, itself tested against the dense reference in
test_blocksparse.py) and against the reference kernel: equal outputs and gradients in float64 on
fresh random inputs, for every pattern in the catalogue, lengths that are not multiples of the
tile, a query offset, key padding, an additive bias with its gradient, grouped-query heads,
strided (non-contiguous) inputs, one and several key-tile groups per GEMM; bf16 within rounding;
attention dropout by gradcheck and by its law."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import BlockSparseKernel, ReferenceKernel, fused_blocks, native
from tfamily.nn.kernels.layout import get_plan, split
from tfamily.nn.patterns import SlidingWindow
from tfamily.nn.patterns.examples import examples

pytestmark = pytest.mark.skipif(native.ops() is None, reason="compiled kernels unavailable (no compiler)")

BLOCK = 16
PATTERNS = {k: p for k, p in examples(80, toys=True).items() if k != "causal"}  # causal goes to SDPA


def _inputs(seed, b=2, h=4, h_kv=2, n=77, m=77, e=8, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, hh, t, e, dtype=dtype, generator=gen).requires_grad_()
            for hh, t in ((h, n), (h_kv, m), (h_kv, m))]


def _run(monkeypatch, compiled, q, k, v, pattern, block=BLOCK, seed=0, **kw):
    """Output and gradients (q, k, v, and the bias when given) of one call on the chosen path."""
    monkeypatch.setenv("TFAMILY_NATIVE", "1" if compiled else "0")
    calls = []
    # one group / a union of groups / per-head groups writing one output
    for node in (fused_blocks.FusedBlockSparse, fused_blocks.FusedUnion, fused_blocks.FusedHeadGroups):
        monkeypatch.setattr(node, "apply", lambda *a, real=node.apply: calls.append(1) or real(*a))
    out, _ = BlockSparseKernel(block)(q, k, v, pattern=pattern, **kw)
    assert bool(calls) == compiled, "the call did not take the path under test"
    inputs = [q, k, v] + ([kw["bias"]] if kw.get("bias") is not None else [])
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    return [out, *torch.autograd.grad(out, inputs, g.to(out.dtype))]


def _same(got, want, tol=1e-10):
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=lambda m: f"tensor {i}: {m}")


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("n", [64, 77])
def test_compiled_path_equals_the_pytorch_path_and_the_reference(monkeypatch, name, n):
    for seed in range(2):
        q, k, v = _inputs(seed + n, n=n, m=n)
        got = _run(monkeypatch, True, q, k, v, PATTERNS[name], seed=seed)
        _same(got, _run(monkeypatch, False, q, k, v, PATTERNS[name], seed=seed))
        out, _ = ReferenceKernel()(q, k, v, pattern=PATTERNS[name])
        g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
        _same(got, [out, *torch.autograd.grad(out, [q, k, v], g)])


@pytest.mark.parametrize("name", ["sliding_window", "strided_merged", "fixed_heads", "bigbird", "local_2d",
                                  "longformer", "mixed_heads"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_offset_padding_and_bias_with_its_gradient(monkeypatch, name, with_bias):
    # Queries 30..79 over 80 keys (a cache or XL memory), padded keys, a learned additive bias.
    n, m = 50, 80
    for seed in range(3):
        q, k, v = _inputs(seed, n=n, m=m)
        gen = torch.Generator().manual_seed(50 + seed)
        bias = torch.randn(1, 4, n, m, dtype=torch.float64, generator=gen).requires_grad_() if with_bias else None
        pad = torch.rand(2, m, generator=gen) > 0.3
        kw = dict(q_offset=m - n, key_padding=pad, bias=bias, seed=seed)
        _same(_run(monkeypatch, True, q, k, v, PATTERNS[name], **kw),
              _run(monkeypatch, False, q, k, v, PATTERNS[name], **kw))


@pytest.mark.parametrize("group_keys", [BLOCK, 2 * BLOCK, 4096])
def test_online_softmax_across_key_groups(monkeypatch, group_keys):
    # One tile per GEMM (the online softmax merges every tile), two, or a whole row in one GEMM.
    monkeypatch.setattr(fused_blocks, "GROUP_KEYS", group_keys)
    for name in ("bigbird", "longformer", "strided_merged"):
        q, k, v = _inputs(3, n=77, m=77)
        _same(_run(monkeypatch, True, q, k, v, PATTERNS[name]), _run(monkeypatch, False, q, k, v, PATTERNS[name]))


@pytest.mark.parametrize("h,h_kv", [(4, 4), (4, 1), (8, 2)])
def test_grouped_query_heads_read_shared_keys(monkeypatch, h, h_kv):
    for name in ("sliding_window", "strided_heads", "bigbird"):
        q, k, v = _inputs(h * 10 + h_kv, b=1, h=h, h_kv=h_kv, n=70, m=70)
        _same(_run(monkeypatch, True, q, k, v, PATTERNS[name]), _run(monkeypatch, False, q, k, v, PATTERNS[name]))


def test_strided_inputs_are_read_in_place(monkeypatch):
    # q, k, v as the projections produce them: (b, n, h, e) viewed as (b, h, n, e).
    gen = torch.Generator().manual_seed(11)
    base = [torch.randn(2, 64, hh, 8, dtype=torch.float64, generator=gen) for hh in (4, 2, 2)]
    strided = [t.transpose(1, 2).requires_grad_() for t in (b.clone() for b in base)]
    strided = [t.detach().requires_grad_() for t in strided]
    assert not strided[0].is_contiguous()
    dense = [t.detach().contiguous().requires_grad_() for t in strided]
    for name in ("sliding_window", "bigbird"):
        _same(_run(monkeypatch, True, *strided, PATTERNS[name]), _run(monkeypatch, True, *dense, PATTERNS[name]))


def test_a_query_that_sees_no_key_outputs_zero_with_finite_gradients(monkeypatch):
    q, k, v = _inputs(5, n=64, m=64)
    pad = torch.ones(2, 64, dtype=torch.bool)
    pad[1] = False  # the second sequence is all padding
    got = _run(monkeypatch, True, q, k, v, PATTERNS["sliding_window"], key_padding=pad)
    assert got[0][1].abs().max() == 0
    assert all(torch.isfinite(t).all() for t in got)
    _same(got, _run(monkeypatch, False, q, k, v, PATTERNS["sliding_window"], key_padding=pad))


@pytest.mark.parametrize("name", ["sliding_window", "bigbird", "strided_merged", "local_2d"])
def test_bfloat16_within_rounding_of_float32(monkeypatch, name):
    q, k, v = _inputs(9, n=70, m=70, e=16, dtype=torch.float32)
    exact = _run(monkeypatch, True, q, k, v, PATTERNS[name])
    half = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    got = _run(monkeypatch, True, *half, PATTERNS[name])
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.bfloat16
    for a, b in zip(got, exact):  # inputs rounded to bf16 (8 bits): errors of a few percent of the scale
        assert (a.float() - b).abs().max() <= 0.05 * b.abs().max() + 1e-3


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("tiles", ["1", "0"])
def test_bf16_tiles_equal_float32_on_the_same_inputs(monkeypatch, name, tiles):
    """bf16 inputs: with ``TFAMILY_BF16_TILES=1`` the kernel reads them as bf16 and multiplies
    bf16 x bf16 -> fp32 (MKL's bf16 GEMM, AMX where present); with 0 they are computed in fp32.
    Either way, outputs and gradients (q, k, v and an additive bias, grouped-query heads, key
    padding, a length that is not a multiple of the tile) equal the float32 kernel on the same
    bf16-rounded inputs up to rounding P and dS to bf16 for their GEMMs and the results to bf16."""
    monkeypatch.setenv("TFAMILY_BF16_TILES", tiles)
    seen = []
    for node in (fused_blocks.FusedBlockSparse, fused_blocks.FusedUnion, fused_blocks.FusedHeadGroups):
        monkeypatch.setattr(node, "apply", lambda *a, real=node.apply: seen.append(a[0].dtype) or real(*a))
    q, k, v = (t.detach().bfloat16() for t in _inputs(21, n=70, m=70, e=16, dtype=torch.float32))
    gen = torch.Generator().manual_seed(5)
    bias = torch.randn(2, 4, 70, 70, generator=gen).bfloat16()
    pad = torch.ones(2, 70, dtype=torch.bool)
    pad[1, 3:11] = False
    runs = []
    for dtype in (torch.bfloat16, torch.float32):
        inputs = [t.to(dtype).requires_grad_() for t in (q, k, v, bias)]
        runs.append(_run(monkeypatch, True, *inputs[:3], PATTERNS[name], bias=inputs[3], key_padding=pad))
    assert set(seen[: len(seen) // 2]) == {torch.bfloat16 if tiles == "1" else torch.float32}
    for i, (a, b) in enumerate(zip(*runs)):
        assert a.dtype == torch.bfloat16 and torch.isfinite(a).all()
        err = (a.float() - b).abs().max()
        assert err <= 0.02 * b.abs().max() + 1e-3, f"tensor {i}: {err} against max {b.abs().max()}"


def _bf16_tiles_match_float32(monkeypatch, q, k, v, pattern, **kw):
    """The bf16 kernel on q, k, v rounded to bf16 against the fp32 kernel on the same values:
    outputs and gradients in bf16, within 2% of the largest value."""
    monkeypatch.setenv("TFAMILY_BF16_TILES", "1")
    half = [t.detach().bfloat16() for t in (q, k, v)]
    runs = [_run(monkeypatch, True, *(t.to(dt).requires_grad_() for t in half), pattern, **kw)
            for dt in (torch.bfloat16, torch.float32)]
    for a, b in zip(*runs):
        assert a.dtype == torch.bfloat16
        assert (a.float() - b).abs().max() <= 0.02 * b.abs().max() + 1e-3


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("name", ["sliding_window", "strided_merged"])
def test_split_query_tiles_sum_their_key_gradients(monkeypatch, name, threads):
    """One (batch, kv head) pair and several threads: the backward splits the query tiles into
    chunks with private dK, dV that are summed (and, for bf16, rounded) at the end; one thread
    takes the whole pair. Both equal the reference (float64) and the fp32 kernel (bf16)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        q, k, v = _inputs(31, b=1, h=2, h_kv=1, n=90, m=90)
        got = _run(monkeypatch, True, q, k, v, PATTERNS[name])
        out, _ = ReferenceKernel()(q, k, v, pattern=PATTERNS[name])
        g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        _same(got, [out, *torch.autograd.grad(out, [q, k, v], g)])
        _bf16_tiles_match_float32(monkeypatch, q, k, v, PATTERNS[name])
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("name", ["strided_heads", "fixed_heads"])
def test_per_head_groups_write_one_output_and_gradient(monkeypatch, name, threads):
    """Per-head patterns with a kv head per query head run as one node (FusedHeadGroups): each
    group's kernel writes its heads (i, i + n, ...) of one output and of one dq, dk, dv through
    strided views, accumulating dK/dV straight into them (one chunk: 1 thread) or copying the
    summed chunks in (4 threads), with key padding. Equal to the PyTorch path and the reference in
    float64, and within rounding of float32 in bf16."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        seen = []
        real = fused_blocks.FusedHeadGroups.apply
        monkeypatch.setattr(fused_blocks.FusedHeadGroups, "apply", lambda *a: seen.append(1) or real(*a))
        q, k, v = _inputs(41, b=2, h=4, h_kv=4, n=75, m=75)
        pad = torch.ones(2, 75, dtype=torch.bool)
        pad[1, 10:30] = False
        got = _run(monkeypatch, True, q, k, v, PATTERNS[name], key_padding=pad)
        assert seen, "the per-head node did not run"
        _same(got, _run(monkeypatch, False, q, k, v, PATTERNS[name], key_padding=pad))
        _bf16_tiles_match_float32(monkeypatch, q, k, v, PATTERNS[name], key_padding=pad)
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("name", ["bigbird", "strided_merged"])  # one softmax group; a union of two
def test_bf16_tiles_redraw_the_float32_dropout_masks(monkeypatch, name):
    """Attention dropout in the bf16 kernel: the same seed draws the same masks as in float32 (a
    hash of positions), so the two agree within bf16 rounding, gradients included."""
    monkeypatch.setenv("TFAMILY_BF16_TILES", "1")
    q, k, v = (t.detach().bfloat16() for t in _inputs(23, n=70, m=70, e=16, dtype=torch.float32))
    runs = []
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(3)
        runs.append(_run(monkeypatch, True, *(t.to(dtype).requires_grad_() for t in (q, k, v)), PATTERNS[name],
                         dropout_p=0.3))
    for i, (a, b) in enumerate(zip(*runs)):
        err = (a.float() - b).abs().max()
        assert err <= 0.02 * b.abs().max() + 1e-3, f"tensor {i}: {err} against max {b.abs().max()}"
    torch.manual_seed(4)  # another seed, other masks: the comparison above can fail
    other = _run(monkeypatch, True, *(t.float().requires_grad_() for t in (q, k, v)), PATTERNS[name], dropout_p=0.3)
    assert (other[0] - runs[1][0]).abs().max() > 0.1 * runs[1][0].abs().max()


def test_float32_agrees_with_float64_within_rounding(monkeypatch):
    q, k, v = _inputs(4, n=77, m=77)
    exact = _run(monkeypatch, True, q, k, v, PATTERNS["bigbird"])
    single = [t.detach().float().requires_grad_() for t in (q, k, v)]
    got = _run(monkeypatch, True, *single, PATTERNS["bigbird"])
    for a, b in zip(got, exact):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["bigbird", "strided_merged"])  # one softmax group; a union of two
def test_dropout_gradients_by_gradcheck(monkeypatch, name):
    monkeypatch.setenv("TFAMILY_NATIVE", "1")
    q, k, v = _inputs(6, b=1, h=2, h_kv=1, n=40, m=40, e=4)
    kernel = BlockSparseKernel(BLOCK)

    def f(q, k, v):
        torch.manual_seed(0)  # the same seed, hence the same mask, at every evaluation
        return kernel(q, k, v, pattern=PATTERNS[name], dropout_p=0.3)[0]
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-6)


def test_dropout_is_seeded_and_unbiased(monkeypatch):
    monkeypatch.setenv("TFAMILY_NATIVE", "1")
    q, k, v = (t.detach() for t in _inputs(8, b=1, h=2, h_kv=2, n=48, m=48))
    kernel = BlockSparseKernel(BLOCK)
    pattern = PATTERNS["sliding_window"]
    torch.manual_seed(1)
    a = kernel(q, k, v, pattern=pattern, dropout_p=0.25)[0]
    torch.manual_seed(1)
    b = kernel(q, k, v, pattern=pattern, dropout_p=0.25)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    plain = kernel(q, k, v, pattern=pattern)[0]
    assert (a - plain).abs().max() > 1e-3  # something was dropped
    mean = sum(kernel(q, k, v, pattern=pattern, dropout_p=0.25)[0] for _ in range(400)) / 400
    # E[out] = the undropped output; the mean of 400 draws is within a few standard errors.
    assert (mean - plain).abs().mean() < 0.05 * plain.abs().mean()


@pytest.mark.parametrize("name", ["strided_merged", "longformer_dilated"])
def test_a_union_runs_as_one_node_merged_by_lse(monkeypatch, name):
    """A union whose parts need different orders is several plan groups; compiled, they are one
    autograd node (FusedUnion) whose backward feeds every group the union's lse: equal to the
    PyTorch path's per-group softmaxes merged by lse, with padding rows that see no key at all."""
    assert len(split(PATTERNS[name])) > 1
    monkeypatch.setenv("TFAMILY_NATIVE", "1")
    seen = []
    for node in (fused_blocks.FusedBlockSparse, fused_blocks.FusedUnion):
        monkeypatch.setattr(node, "apply", lambda *a, node=node, real=node.apply: seen.append(node) or real(*a))
    q, k, v = _inputs(11, n=77, m=77)
    pad = torch.ones(2, 77, dtype=torch.bool)
    pad[0, 5:40] = False
    pad[1] = False  # every key padded: zero output, finite gradients
    out, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=PATTERNS[name], key_padding=pad)
    assert seen == [fused_blocks.FusedUnion]
    assert out[1].abs().max() == 0
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    got = [out, *torch.autograd.grad(out, [q, k, v], g)]
    assert all(torch.isfinite(t).all() for t in got)
    monkeypatch.setenv("TFAMILY_NATIVE", "0")
    want, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=PATTERNS[name], key_padding=pad)
    _same(got, [want, *torch.autograd.grad(want, [q, k, v], g)])


def test_narrow_tiles_score_only_the_columns_their_queries_see(monkeypatch):
    """Longformer's global columns fill a few columns of their key tile: the kernel scores only
    up to the last column any query of the tile may see, and that tile runs as its own product
    beside the window's run of consecutive tiles; the result is the reference's."""
    from tfamily.nn.patterns import GlobalTokens, Union
    pattern = Union(SlidingWindow(20), GlobalTokens(3))
    (qo, parts), = split(pattern)
    plan = get_plan(parts, qo, 96, 96, 0, BLOCK, None, torch.device("cpu"), engine="fused")
    _, _, _, row_ptr, cols, mids, widths, masks = fused_blocks.plan_rows(plan)
    assert bool((widths[cols == 0][3:] == 3).all())  # rows past the window see columns 0-2 of tile 0
    for x in range(cols.numel()):  # no column at or past a tile's width is allowed to any query
        if mids[x] >= 0:
            assert not bool(masks[int(mids[x])][:, int(widths[x]):].any())
    for seed in range(2):
        q, k, v = _inputs(seed + 40, n=96, m=96)
        got = _run(monkeypatch, True, q, k, v, pattern, seed=seed)
        out, _ = ReferenceKernel()(q, k, v, pattern=pattern)
        g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
        _same(got, [out, *torch.autograd.grad(out, [q, k, v], g)])


def test_plan_rows_list_every_live_tile_once():
    pattern = SlidingWindow(20)
    (qo, parts), = split(pattern)
    plan = get_plan(parts, qo, 100, 100, 0, BLOCK, None, torch.device("cpu"))
    q_index, q_valid, k_index, row_ptr, cols, mids, widths, masks = fused_blocks.plan_rows(plan)
    assert row_ptr[-1] == cols.numel() == mids.numel() == widths.numel()
    assert set(mids[mids >= 0].tolist()) == set(range(masks.shape[0]))  # every stored mask is used
    assert masks.unique(dim=0).shape[0] == masks.shape[0]  # and stored once
    assert bool((widths[mids < 0] == BLOCK).all())  # a tile allowed everywhere is scored whole
    live = sum(int(bk.mask.view(bk.kv.shape[0], BLOCK, -1, BLOCK).any(1).any(-1).sum()) for bk in plan.buckets)
    assert cols.numel() == live
    for r in range(plan.n_q_tiles):  # a row's tiles are distinct and cover its window
        row = cols[row_ptr[r]:row_ptr[r + 1]].tolist()
        assert len(row) == len(set(row)) and max(row) == r


class _Recorder:
    """The compiled ops, recording each call's name and arguments."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __getattr__(self, name):
        fn = getattr(self.real, name)

        def call(*args):
            result = fn(*args)
            self.calls.append((name, args, result))
            return result
        return call


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_union_merges_its_groups_inside_the_kernels(monkeypatch, dtype):
    """The second group's forward merges into the first group's (out, lse) in place, and its
    backward adds into the first's dq, dk, dv (float32 for bf16 inputs, rounded once at the end).
    Equal to the PyTorch path."""
    pattern = PATTERNS["strided_merged"]
    assert len(split(pattern)) == 2
    monkeypatch.setenv("TFAMILY_NATIVE", "1")
    rec = _Recorder(native.ops())
    monkeypatch.setattr(fused_blocks, "usable", lambda q: rec)
    q, k, v = (t.to(dtype).detach().requires_grad_() for t in _inputs(5, n=96, m=96))
    out, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=pattern)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    grads = torch.autograd.grad(out, [q, k, v], g)
    fwd = [(a, r) for name, a, r in rec.calls if name == "blocksparse_forward"]
    bwd = [(a, r) for name, a, r in rec.calls if name == "blocksparse_backward"]
    assert len(fwd) == 2 and len(bwd) == 2
    (_, (out0, lse0)), (args1, (out1, lse1)) = fwd
    assert args1[-2] is out0 and args1[-1] is lse0  # merged in place: one output, one lse
    assert out1.data_ptr() == out0.data_ptr() and lse1.data_ptr() == lse0.data_ptr()
    assert [a[-1] for a, _ in bwd] == [False, True]  # the second group adds into the first's
    assert all(bwd[0][0][i] is bwd[1][0][i] for i in (-4, -3, -2))  # one dq, dk, dv
    assert bwd[0][0][-4].dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)  # summed, then rounded
    monkeypatch.setenv("TFAMILY_NATIVE", "0")
    want, _ = BlockSparseKernel(BLOCK)(q, k, v, pattern=pattern)
    tol = 1e-10 if dtype == torch.float64 else 3e-2
    _same([out, *grads], [want, *torch.autograd.grad(want, [q, k, v], g)], tol=tol)
