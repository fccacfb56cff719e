"""Block-sparse attention on PyTorch FlexAttention (compiled), CPU and CUDA.

The block mask comes from the same cached plan as the ``blocksparse`` kernel
(nn/kernels/layout.py), so it is built once per (pattern, lengths, offset, block
size, heads, device) with no L x L buffer and no compiled ``create_block_mask``:
plans list each query tile's key tiles, split into partial tiles (mask_mod
evaluated) and full ones (skipped). Reordered patterns run on the permuted
sequence; unions needing two query orders are merged by log-sum-exp (members
sharing a query order are one plan, one call: ``layout.split``).

A plan in natural order (no permutation, no tile padding, no query offset) is the
plain FlexAttention call: no gathers, the pattern's own ``mask_mod`` in the block
mask, and no clean-up of the output when every query sees some key. Before this path
the kernel took 16x the plain call's forward on a sliding window at 16K (an H200, torch
2.11, bf16), and 1.2-4x on the CPU (experiments/flex_overhead/);
``tfamily bench flex-floor`` measures the kernel against the plain call.

Attention dropout is refused: FlexAttention has none, and a score_mod can only drop
scores *before* the softmax, which renormalises over the kept keys instead of
zeroing weights and rescaling the rest by 1 / (1 - p) as dropout does (Srivastava et
al. 2014).

In torch 2.13 FlexAttention on CPU is compiled-only and forward-only: it refuses
inputs that require grad. This kernel says so and points to ``blocksparse``, which
trains on CPU. The CUDA path is the same code with the device as a setting: on an
H100 (torch 2.11) it matches the reference in outputs and q, k, v, bias gradients for
every catalogue pattern at block 128 (``scripts/cuda_kernel_check.py``; rows in
experiments/training/cuda_h100/kernel_check/).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..patterns import Causal, Full, Pattern, PerHead
from .blocksparse import check_block_size, dense_attention, per_head_attention, sparse_attention
from .layout import get_plan, parts_per_head, split
from .plan import Plan
from .sdpa import SDPAKernel

_SDPA = SDPAKernel()

_FLEX = None

# FlexAttention's Triton kernels tile queries and keys by up to 128 and fail to compile a
# block mask whose block is not a multiple of their tile (an H100, torch 2.11: block 32
# raised "Q and KV block size must be divisible by BLOCK_M and BLOCK_N" for every pattern).
CUDA_BLOCK_MULTIPLE = 128


def check_device_block(device_type: str, block: int) -> None:
    if device_type == "cuda" and block % CUDA_BLOCK_MULTIPLE:
        raise ValueError(f"kernel 'flex' on CUDA needs block_size a multiple of {CUDA_BLOCK_MULTIPLE} "
                         f"(got {block}): FlexAttention's GPU kernels tile by up to 128. Use "
                         f"block_size={CUDA_BLOCK_MULTIPLE}, or kernel='blocksparse' for finer tiles")


def _flex():
    global _FLEX
    if _FLEX is None:
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention
        # A pattern's constants are compiled into the kernel, so each (pattern, shape) compiles
        # once (a new plan of the same pattern and shape does not: its tables are guarded by
        # shape, not identity). Past dynamo's default limit of 8 flex would silently run
        # eagerly, materialising L x L scores; a model with per-layer patterns needs more.
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 128)
        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


class FlexKernel:
    citation = "Child et al. 2019, section 5.5: block-sparse attention, on FlexAttention (Dong et al. 2024)"

    name = "flex"

    def __init__(self, block_size: int = 128):
        if block_size == "auto":
            raise ValueError("flex: block_size='auto' is a blocksparse option; give an integer (e.g. 128)")
        self.block_size = check_block_size("flex", block_size)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            raise ValueError("kernel 'flex' cannot return attention weights; use kernel='reference'")
        if isinstance(pattern, (Full, Causal)):  # nothing to skip beyond what fused SDPA skips
            return _SDPA(q, k, v, pattern=pattern, q_offset=q_offset, key_padding=key_padding, bias=bias,
                         dropout_p=dropout_p, scale=scale)
        check_device_block(q.device.type, self.block_size)
        if dropout_p > 0:
            raise ValueError(f"kernel 'flex' cannot apply attention dropout (got dropout_p={dropout_p}): "
                             f"FlexAttention has no dropout and a score_mod would renormalise over the kept "
                             f"keys; use kernel='blocksparse' (sparse, dropout on CPU and CUDA) or "
                             f"kernel='sdpa' (dense masked), or set attn_dropout=0")
        if q.device.type == "cpu" and torch.is_grad_enabled() and any(
                t.requires_grad for t in (q, k, v) + ((bias,) if bias is not None else ())):
            raise ValueError("kernel 'flex' is forward-only on CPU (torch 2.13 FlexAttention refuses "
                             "inputs that require grad there); train with kernel='blocksparse' or on CUDA")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        if q.shape[-2] < self.block_size:
            return dense_attention(q, k, v, pattern, q_offset, key_padding, bias, 0.0, scale), None
        ctx = dict(q_offset=q_offset, key_padding=key_padding, scale=scale, block=self.block_size)
        return flex_attention(q, k, v, pattern, tuple(range(q.shape[1])), bias, ctx), None


def flex_attention(q: Tensor, k: Tensor, v: Tensor, pattern, heads: tuple, bias, ctx: dict) -> Tensor:
    if isinstance(pattern, PerHead):
        return per_head_attention(q, k, v, pattern, heads, bias, flex_attention, ctx)
    groups = split(pattern)
    if len(groups) == 1:
        out, _, live = _group(q, k, v, *groups[0], heads, bias, ctx, want_lse=False)
        return out if live is None else out * live
    if q.device.type == "cpu":
        # Compiled CPU FlexAttention has no return_lse (torch 2.13): merge with the gather path.
        return sparse_attention(q, k, v, pattern, heads, bias, dict(ctx, dropout_p=0.0))
    results = [_group(q, k, v, qo, parts, heads, bias, ctx, want_lse=True) for qo, parts in groups]
    # A finite floor for rows that see no key in a group, as in tiled.sparse_attention.
    lses = torch.stack([r[1] for r in results])
    lses = lses.clamp_min(torch.finfo(lses.dtype).min / 2)
    lse = torch.logsumexp(lses, 0)
    out = sum(r[0] * torch.exp(l - lse)[..., None].to(r[0].dtype) for r, l in zip(results, lses))
    lives = [r[2] for r in results]
    if any(live is None for live in lives):  # a group where every query sees a key
        return out
    return out * torch.stack([live.expand(q.shape[:3] + (1,)) for live in lives]).any(0)


def _group(q, k, v, query_order, parts, heads, bias, ctx, want_lse: bool):
    """One FlexAttention call over a plan: (out, lse | None, live | None); live None when every
    query sees some key, so the output needs no clean-up."""
    b, h, n, e = q.shape
    per_head = parts_per_head(parts)
    plan = get_plan(parts, query_order, n, k.shape[2], ctx["q_offset"], ctx["block"],
                    heads if per_head else None, q.device)
    block_mask = _block_mask(plan, parts, ctx["q_offset"])
    # Gathers only where the plan reorders or pads: each is a read and a write of (b, h, L, e),
    # and in training its backward is a scatter.
    qv = q if plan.q_identity else q.index_select(2, plan.q_index)
    kv, vv = (k, v) if plan.k_identity else (k.index_select(2, plan.k_index), v.index_select(2, plan.k_index))
    score_mod = _score_mod(plan, ctx["key_padding"], bias, b, h)
    res = _flex()(qv, kv, vv, score_mod=score_mod, block_mask=block_mask, scale=ctx["scale"],
                  enable_gqa=k.shape[1] != h, return_lse=want_lse)
    out, lse = res if want_lse else (res, None)
    if not plan.q_identity:
        out = out.index_select(2, plan.q_slot)
        lse = None if lse is None else lse.index_select(2, plan.q_slot)
    lse = None if lse is None else lse.float()
    if plan.all_live and ctx["key_padding"] is None and bias is None:
        # Every query sees a key with a finite score: no empty softmax, nothing to zero.
        return out, lse, None
    live = plan.row_any[None, :, :, None]
    if lse is not None:
        live = live & torch.isfinite(lse)[..., None]
    # A query whose keys are all padding gets no finite score: its output is zeroed.
    return torch.nan_to_num(out), lse, live


def natural_order(plan: Plan, q_offset: int) -> bool:
    """Whether FlexAttention's indices are the pattern's own positions and heads: then the block
    mask can hold the pattern's ``mask_mod`` itself instead of a lookup through the plan."""
    heads = plan.heads
    return (plan.q_identity and plan.k_identity and q_offset == 0
            and (heads is None or heads == tuple(range(len(heads)))))


def _block_mask(plan: Plan, parts, q_offset: int):
    """The plan as a FlexAttention BlockMask, cached on the plan (whose key holds q_offset)."""
    cached = plan.cache.get("flex")
    if cached is not None:
        return cached
    from torch.nn.attention.flex_attention import BlockMask
    H, nq, nk, B = plan.n_layout_heads, plan.n_q_tiles, plan.n_k_tiles, plan.block
    dev = plan.q_index.device
    tables = {kind: (torch.zeros(H * nq, dtype=torch.int32, device=dev),
                     torch.zeros(H * nq, nk, dtype=torch.int32, device=dev)) for kind in ("partial", "full")}
    for bk in plan.buckets:
        R, K = bk.kv.shape
        live = bk.live
        for kind, sel in (("partial", live & ~bk.full), ("full", bk.full)):
            order = torch.sort((~sel).to(torch.uint8), dim=1, stable=True).indices
            num, idx = tables[kind]
            num[bk.rows] = sel.sum(1).to(torch.int32)
            idx[bk.rows, :K] = torch.gather(bk.kv, 1, order).clamp(0, nk - 1).to(torch.int32)
    shape = lambda t: t.view(1, H, nq, *t.shape[1:])  # noqa: E731
    # In natural order the pattern's bound mask_mod is the whole rule: the compiled kernel then
    # reads no position tables, and equal patterns at one shape share one compiled graph.
    mask_mod = parts[0].mask_mod if natural_order(plan, q_offset) else _mask_mod(plan, parts)
    mask = BlockMask.from_kv_blocks(
        shape(tables["partial"][0]), shape(tables["partial"][1]), shape(tables["full"][0]),
        shape(tables["full"][1]), BLOCK_SIZE=B, mask_mod=mask_mod,
        seq_lengths=(plan.q_index.numel(), plan.k_index.numel()))
    plan.cache["flex"] = mask
    return mask


def _mask_mod(plan: Plan, parts):
    q_pos, q_valid = plan.q_pos, plan.q_valid
    k_pos, k_valid, k_part = plan.k_pos, plan.k_valid, plan.k_part
    heads = None if plan.heads is None else torch.tensor(plan.heads, device=q_pos.device)

    def mask_mod(b, h, q_idx, kv_idx):
        hh = h if heads is None else heads[h]
        qp, kp, part = q_pos[q_idx], k_pos[kv_idx], k_part[kv_idx]
        out = (part == 0) & parts[0].mask_mod(b, hh, qp, kp)
        for i, p in enumerate(parts[1:], 1):
            out = out | ((part == i) & p.mask_mod(b, hh, qp, kp))
        return out & q_valid[q_idx] & k_valid[kv_idx]
    return mask_mod


def _score_mod(plan: Plan, key_padding, bias, b: int, h: int):
    if key_padding is None and bias is None:
        return None
    kp = None if key_padding is None else key_padding.index_select(1, plan.k_index)
    if bias is not None:
        bias = bias.index_select(-2, plan.q_index).index_select(-1, plan.k_index)
    bb, hb = (bias.shape[0] > 1, bias.shape[1] > 1) if bias is not None else (False, False)

    def score_mod(score, bi, hi, q_idx, kv_idx):
        if bias is not None:
            score = score + bias[bi if bb else 0, hi if hb else 0, q_idx, kv_idx]
        if kp is not None:
            score = torch.where(kp[bi, kv_idx], score, -float("inf"))
        return score
    return score_mod
