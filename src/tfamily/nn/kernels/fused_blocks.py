"""The compiled path of the block-sparse kernel (``csrc/blocksparse.cpp``).

Computes one plan group (one softmax) in place: each query tile against the key tiles its
plan row lists, online softmax, the log-sum-exp returned for unions merged by the caller, and
a FlashAttention-2 backward that recomputes the tiles. The same function as
``tiled.attend_group``'s gather-and-SDPA path (tested equal in outputs and gradients).

It serves CPU tensors in float32, float64, bfloat16 and float16. bfloat16 runs its own kernel
where the CPU multiplies bf16 natively (AVX512-BF16 or AMX: ``bf16_tiles``): q, k, v are read
in bf16 and every tile GEMM is MKL's bf16 x bf16 -> fp32 one, with scores, softmax statistics,
the output before rounding and all gradients in fp32 (the scheme of SDPA's own bf16 CPU
kernel). Elsewhere, and for float16, the inputs are computed in float32. Attention dropout
draws its masks from a hash of (seed, batch, head, query, key), the seed from torch's
generator, so the masks differ from the SDPA path's but follow the same law and the backward
redraws them exactly.
"""
from __future__ import annotations

import os

import torch
from torch import Tensor

from ...base.hardware import cpu_has_bf16
from . import native
from .plan import Plan

_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def usable(q: Tensor):
    """The compiled ops when they can serve this call, else None."""
    if q.device.type != "cpu" or q.dtype not in _DTYPES:
        return None
    return native.ops()


def plan_rows(plan: Plan) -> tuple:
    """The plan as compressed rows, cached on it: ``(q_index, q_valid, k_index, row_ptr, cols,
    mids, widths, masks)``. Row ``head * n_q_tiles + tile`` visits key tiles
    ``cols[row_ptr[r]:row_ptr[r+1]]``; ``mids`` is -1 for a tile allowed everywhere, else the index
    of its (B, B) mask in ``masks``, the plan's table of distinct masks (entries share them);
    ``widths`` the keys the kernel scores from the tile's start: B, or up to the last column any
    of the tile's queries may see (longformer's 16 global columns in a 128-key tile are 16 keys,
    not 128)."""
    hit = plan.cache.get("rows")
    if hit is not None:
        return hit
    B = plan.block
    rows, cols, mids = plan.entries()
    order = torch.sort(rows, stable=True).indices
    rows, cols, mids = rows[order], cols[order], mids[order].to(torch.int32)
    n_rows = plan.n_layout_heads * plan.n_q_tiles
    row_ptr = torch.zeros(n_rows + 1, dtype=torch.long)
    row_ptr[1:] = torch.bincount(rows, minlength=n_rows).cumsum(0)
    # Each distinct mask's width: up to its last column some query of the tile may see.
    seen = plan.masks.any(-2)  # (U, B)
    mask_widths = torch.cat([B - seen.flip(-1).to(torch.uint8).argmax(-1), torch.tensor([B])])
    widths = mask_widths[torch.where(mids >= 0, mids.long(), -1)]  # FULL reads the appended B
    out = (plan.q_index.contiguous(), plan.q_valid.to(torch.uint8).contiguous(), plan.k_index.contiguous(),
           row_ptr, cols.to(torch.int32).contiguous(), mids.contiguous(), widths.to(torch.int32).contiguous(),
           plan.masks.to(torch.uint8).contiguous())
    plan.cache["rows"] = out
    return out


def bf16_tiles() -> bool:
    """Whether bfloat16 inputs run the bf16 kernel: by default where the CPU multiplies bf16
    natively (elsewhere MKL would emulate it, slower than float32); ``TFAMILY_BF16_TILES=0`` or
    ``1`` overrides (the tests run both kernels on every CPU)."""
    forced = os.environ.get("TFAMILY_BF16_TILES")
    if forced is not None:
        return forced not in ("0", "false", "no", "off")
    return cpu_has_bf16()


def _acc(dtype: torch.dtype) -> torch.dtype:
    """The kernel's dtype for softmax statistics, biases and gradients."""
    return torch.float32 if dtype == torch.bfloat16 else dtype


def _prepare(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None):
    """q, k, v in the kernel's input dtype, and the bias, expanded to (b, h, n, m), in its
    accumulation dtype."""
    if q.dtype in (torch.float32, torch.float64) or (q.dtype == torch.bfloat16 and bf16_tiles()):
        work = q.dtype
    else:
        work = torch.float32
    q, k, v = (_rows(t.to(work)) for t in (q, k, v))
    if bias is not None:
        while bias.dim() < 4:
            bias = bias[None]
        bias = bias.to(_acc(work)).expand(*q.shape[:3], k.shape[2])
    return q, k, v, bias


def _args(plan: Plan, q: Tensor, key_padding: Tensor | None, bias: Tensor | None, scale: float,
          dropout_p: float) -> tuple:
    """The op's arguments after q, k, v for one plan group (its own dropout seed)."""
    kp = None if key_padding is None else key_padding.to(torch.uint8).contiguous()
    seed = int(torch.randint(0, 2 ** 62, ()).item()) if dropout_p > 0 else 0
    empty = q.new_empty(0)
    return plan_rows(plan) + (empty if kp is None else kp, empty if bias is None else bias, plan.block,
                              plan.heads is not None, plan.q_identity, plan.k_identity, float(scale),
                              float(dropout_p), seed)


def attend(ops, q: Tensor, k: Tensor, v: Tensor, plan: Plan, key_padding: Tensor | None, bias: Tensor | None,
           scale: float, dropout_p: float) -> tuple[Tensor, Tensor]:
    """One plan group: ``(out (b, h, n, e), lse (b, h, n))`` in q's dtype; a query that sees no
    key has a zero output and lse = the dtype's lowest value."""
    dtype = q.dtype
    q, k, v, bias = _prepare(q, k, v, bias)
    args = _args(plan, q, key_padding, bias, scale, dropout_p)
    out, lse = FusedBlockSparse.apply(q, k, v, bias, args, group_tiles(plan.block), ops)
    return out.to(dtype), lse.to(dtype)


def attend_union(ops, q: Tensor, k: Tensor, v: Tensor, plans: list[Plan], key_padding: Tensor | None,
                 bias: Tensor | None, scale: float, dropout_p: float) -> Tensor:
    """One softmax over the union of several plan groups (each in its own query/key order, e.g.
    the strided pattern's local part in natural order and its column part transposed): the
    groups' outputs merged by their log-sum-exps, ``out = sum_g exp(lse_g - lse) out_g``, as
    ``tiled.sparse_attention``'s PyTorch path does, but inside the kernels: each group
    after the first merges into the one (out, lse) as it finishes a query row. One autograd
    node, whose backward runs each group's kernel with the *union's* lse and ``rowsum(dO * O)``:
    that is the FlashAttention-2 backward of the union softmax restricted to the group's keys,
    so no per-group weights, products or their gradients are ever formed."""
    dtype = q.dtype
    q, k, v, bias = _prepare(q, k, v, bias)
    calls = tuple((_args(p, q, key_padding, bias, scale, dropout_p), group_tiles(p.block)) for p in plans)
    return FusedUnion.apply(q, k, v, bias, calls, ops).to(dtype)


def attend_head_groups(ops, q: Tensor, k: Tensor, v: Tensor, plans: list[Plan], key_padding: Tensor | None,
                       scale: float, dropout_p: float) -> Tensor:
    """Per-head patterns whose group i is heads i, i + n, i + 2n, ... (``n = len(plans)``), each
    group one plan, q, k, v with one head per kv head and no bias: one autograd node whose
    kernels write their heads of one output, and in the backward of one dq, dk, dv, through
    strided views. The unbind/stack route copies every output and gradient once more (its
    copies were 26 of 181 ms of strided_heads' fwd+bwd at 16K; scripts/blocksparse_profile.py)."""
    dtype = q.dtype
    q, k, v, _ = _prepare(q, k, v, None)
    calls = tuple((_args(p, q, key_padding, None, scale, dropout_p), group_tiles(p.block)) for p in plans)
    return FusedHeadGroups.apply(q, k, v, calls, ops).to(dtype)


def _group(t: Tensor, n: int, i: int) -> Tensor:
    """Heads i, i + n, ... of (b, h, L, e): a strided view."""
    return t.unflatten(1, (t.shape[1] // n, n))[:, :, i]


class FusedHeadGroups(torch.autograd.Function):
    """``attend_head_groups``'s node: ``calls`` holds each group's op arguments and tile group size."""

    @staticmethod
    def forward(ctx, q, k, v, calls, ops):
        n, out = len(calls), torch.empty_like(q)
        lses = [ops.blocksparse_forward(_group(q, n, i), _group(k, n, i), _group(v, n, i), *args, group,
                                        _group(out, n, i), _NONE)[1] for i, (args, group) in enumerate(calls)]
        ctx.save_for_backward(q, k, v, out, *lses)
        ctx.calls, ctx.ops = calls, ops
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, *lses = ctx.saved_tensors
        dout = _rows(dout.to(q.dtype))
        n = len(ctx.calls)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        for i, ((args, group), lse) in enumerate(zip(ctx.calls, lses)):
            qi, ki, vi, di, oi = (_group(t, n, i) for t in (q, k, v, dout, out))
            delta = ctx.ops.blocksparse_rowdot(di, oi, lse.new_empty(0))
            ctx.ops.blocksparse_backward(qi, ki, vi, *args, lse, delta, di, False, group, True, _group(dq, n, i),
                                         _group(dk, n, i), _group(dv, n, i), False)
        return dq, dk, dv, None, None


def _rows(t: Tensor) -> Tensor:
    """The kernel reads rows in place at any batch/head/row strides; only the head dim must be dense."""
    return t if t.stride(-1) == 1 else t.contiguous()


_NONE = torch.empty(0)  # an absent optional buffer of the compiled ops

# Keys per GEMM: a query tile's key tiles are scored in groups of about this many keys (one
# B x W product instead of W / B small ones), small enough that a group's scores stay in L2.
GROUP_KEYS = 512


def group_tiles(block: int) -> int:
    return max(1, GROUP_KEYS // block)


class FusedBlockSparse(torch.autograd.Function):
    """``bias`` is passed twice: as an input (for its gradient) and inside ``args`` (for the op)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, args, group, ops):
        out, lse = ops.blocksparse_forward(q, k, v, *args, group, _NONE, _NONE)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args, ctx.group, ctx.ops, ctx.has_bias = args, group, ops, bias is not None
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dout = torch.zeros_like(out) if dout is None else _rows(dout.to(q.dtype))
        # d lse = softmax: it enters as a shift of rowsum(dO * O) (the caller merges unions by lse).
        dlse = lse.new_empty(0) if dlse is None else dlse.to(lse.dtype).contiguous()
        delta = ctx.ops.blocksparse_rowdot(dout, out, dlse)
        bias_grad = ctx.has_bias and ctx.needs_input_grad[3]
        dq, dk, dv, db = ctx.ops.blocksparse_backward(q, k, v, *ctx.args, lse, delta, dout, bias_grad, ctx.group,
                                                       True, _NONE, _NONE, _NONE, False)
        return dq, dk, dv, (db if bias_grad else None), None, None, None


class FusedUnion(torch.autograd.Function):
    """``attend_union``'s node: ``calls`` holds each group's op arguments and tile group size.

    Forward: the first group writes (out, lse); every later group's kernel merges its softmax into
    them by log-sum-exp as it finishes each query row (``lse_buf``), so no group has an output of
    its own. Backward: every group's kernel gets the union's lse and D; in float32/float64 each adds
    its share into one dq, dk, dv (``accumulate``), float32 for bf16 inputs, rounded once at the end
    (bf16 buffers would round each group's share)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, calls, ops):
        (args, group), rest = calls[0], calls[1:]
        out, lse = ops.blocksparse_forward(q, k, v, *args, group, _NONE, _NONE)
        for args, group in rest:
            ops.blocksparse_forward(q, k, v, *args, group, out, lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.calls, ctx.ops, ctx.has_bias = calls, ops, bias is not None
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dout = _rows(dout.to(q.dtype))
        delta = ctx.ops.blocksparse_rowdot(dout, out, lse.new_empty(0))
        bias_grad = ctx.has_bias and ctx.needs_input_grad[3]
        acc = lse.dtype  # float32 for bf16 inputs: the groups' shares are summed before one rounding
        dq, dk, dv = (t.new_empty(t.shape, dtype=acc) for t in (q, k, v))
        db = None
        for i, (args, group) in enumerate(ctx.calls):
            gb = ctx.ops.blocksparse_backward(q, k, v, *args, lse, delta, dout, bias_grad, group, False, dq, dk, dv,
                                              i > 0)[3]
            if bias_grad:
                db = gb if db is None else db.add_(gb)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), db, None, None
