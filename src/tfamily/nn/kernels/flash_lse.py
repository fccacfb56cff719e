"""Fused attention that also returns its log-sum-exp, differentiably, on CPU.

Merging attention over disjoint key sets (the block-sparse kernel's unions whose parts
need different query orders) needs each part's log-sum-exp with a gradient. SDPA
returns no log-sum-exp, and recomputing it as ``logsumexp(q k^T)`` costs a second
score matmul and an unfused exp in both passes (`tfamily bench attention --seq-lens
16384 --patterns strided_merged`: 1,665-2,825 ms before, 865-1,132 ms with this). PyTorch's CPU flash kernel does return it, but its autograd formula treats it
as non-differentiable, so the gradient is written here: one call of the same kernel's
backward with the log-sum-exp gradient folded in (see ``_FlashLSE.backward``).

``attention_with_lse`` falls back to the composite (SDPA + recomputed log-sum-exp)
where the fused op cannot be used: not on CPU, dropout, or a mask that needs a
gradient; ``reference_attention_with_lse`` is that composite, kept as the reference.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Private ATen ops (stable across torch 2.x so far; torch is pinned): when a future
# version drops them, everything here falls back to the composite.
_FWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def reference_attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None,
                                 dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """(out, lse) with lse in fp32 (fp64 for fp64 inputs), all differentiable through autograd."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    scores = (q @ k.transpose(-1, -2)).to(acc) * s + mask.to(acc)
    return out, torch.logsumexp(scores, -1)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None,
                       dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    fused = (_FWD is not None and _BWD is not None and q.device.type == "cpu" and dropout_p == 0.0
             and not mask.requires_grad and q.dtype in (torch.float32, torch.bfloat16)
             and q.dtype == k.dtype == v.dtype == mask.dtype
             and q.shape[-1] == k.shape[-1] == v.shape[-1] and q.dim() == 4)
    if not fused:
        return reference_attention_with_lse(q, k, v, mask, scale, dropout_p)
    return _FlashLSE.apply(q, k, v, mask, scale)


def _pad1(t: Tensor, value: float = 0.0) -> Tensor:
    return torch.cat([t, t.new_full((*t.shape[:-1], 1), value)], -1)


class _FlashLSE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        out, lse = _FWD(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.scale = scale
        return out, lse

    @staticmethod
    def backward(ctx, g_out, g_lse):
        q, k, v, mask, out, lse = ctx.saved_tensors
        g_out = torch.zeros_like(out) if g_out is None else g_out.contiguous()
        if g_lse is None:
            dq, dk, dv = _BWD(g_out, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale)
            return dq, dk, dv, None, None
        # With P = softmax(S): dS = P * (dO V^T - D) with D = rowsum(dO * O), and the
        # log-sum-exp adds P * g_lse, i.e. D -> D - g_lse. The kernel computes D from the
        # `out` it is given, so one extra column carries the term: 1 in `out`, -g_lse in
        # dO, 0 in V (dO V^T is unchanged) and, since the kernel needs one head size, 0 in
        # Q and K (scores unchanged). The extra gradient columns are dropped.
        # The scale is passed explicitly: the kernel's default would use the padded size.
        scale = q.shape[-1] ** -0.5 if ctx.scale is None else ctx.scale
        g = torch.cat([g_out, (-g_lse).to(g_out.dtype)[..., None]], -1)
        dq, dk, dv = _BWD(g, _pad1(q), _pad1(k), _pad1(v), _pad1(out, 1.0), lse, 0.0, False,
                          attn_mask=mask, scale=scale)
        return dq[..., :-1], dk[..., :-1], dv[..., :-1], None, None
