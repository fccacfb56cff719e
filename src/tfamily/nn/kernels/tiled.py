"""Block-sparse attention without a compiler: gather, per query tile, the key tiles
its plan lists, and run the fused SDPA kernel on the gathered tiles.

Cost follows the plan's tile density and nothing is L x L: the gathered keys are
(query tiles x tiles visited x tile) and the tile masks the same. Autograd runs
through tile gathers and SDPA, so this path trains on CPU, where FlexAttention is
forward-only (torch 2.13). The same code runs on CUDA (device is a setting).

Grouped-query heads sharing a layout are folded into the query rows of one tile
(g query heads x B rows against the same keys), so K/V are never copied per head.
A union whose parts need different query orders (the strided pattern's merged
head, Child et al. 2019 eq. 4) is computed per order and merged by log-sum-exp.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..patterns import PerHead
from . import fused_blocks
from .base import allowed_mask
from .flash_lse import attention_with_lse
from .gather import permute, reorder, take
from .layout import AUTO_BLOCKS, cost_engine, get_plan, parts_per_head, split
from .tiles import PerHeadTiles, SharedTiles

# Additive masks up to this many elements (64 MB in fp32) stay cached on their plan.
_CACHED_MASK_ELEMENTS = 1 << 24


def min_block(block_size) -> int:
    return min(AUTO_BLOCKS) if block_size == "auto" else block_size


def dense_attention(q, k, v, pattern, q_offset, key_padding, bias, dropout_p, scale) -> Tensor:
    allowed = allowed_mask(pattern, q, k, q_offset, key_padding)
    mask = torch.zeros((), dtype=q.dtype, device=q.device) if bias is None else bias.to(q.dtype)
    mask = mask.masked_fill(~allowed, torch.finfo(q.dtype).min)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                         enable_gqa=bool(k.shape[1] != q.shape[1]))
    return out * allowed.any(-1, keepdim=True)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, pattern, heads: tuple, bias, ctx: dict) -> Tensor:
    """``q`` (b, h, n, e), ``k``/``v`` (b, h_kv, m, e); ``heads`` are q's global head ids."""
    if isinstance(pattern, PerHead):
        return per_head_attention(q, k, v, pattern, heads, bias, sparse_attention, ctx)
    groups = split(pattern)
    ops = fused_blocks.usable(q)
    if ops is not None and len(groups) > 1:  # the union merged inside one autograd node
        plans = [group_plan(q, k, qo, parts, heads, ctx, ops) for qo, parts in groups]
        return fused_blocks.attend_union(ops, q, k, v, plans, ctx["key_padding"], bias, ctx["scale"],
                                         ctx["dropout_p"])
    if len(groups) == 1:
        out, _, live = attend_group(q, k, v, *groups[0], heads, bias, ctx, want_lse=False)
        return _mul(out, live)
    results = [attend_group(q, k, v, qo, parts, heads, bias, ctx, want_lse=True) for qo, parts in groups]
    _, weights = union_weights(torch.stack([r[1] for r in results]))
    out = sum(r[0] * w[..., None].to(r[0].dtype) for r, w in zip(results, weights))
    if all(r[2] is None for r in results):
        return out
    ones = torch.ones((), dtype=torch.bool, device=q.device)
    live = torch.stack([(ones if r[2] is None else r[2]).expand(q.shape[:3] + (1,)) for r in results])
    return out * live.any(0)


def per_head_attention(q, k, v, pattern: PerHead, heads: tuple, bias, fn, ctx: dict) -> Tensor:
    """Run each head group with its own pattern (Child et al. 2019, eq. 5) and reassemble."""
    n, h, h_kv = len(pattern.patterns), q.shape[1], k.shape[1]
    g = h // h_kv
    if heads == tuple(range(h)) and h % n == 0 and (g == 1 or g % n == 0):
        return _interleaved_heads(q, k, v, pattern, bias, fn, ctx)
    outs, order = [], []
    for i in range(n):
        local = [j for j, hid in enumerate(heads) if hid % n == i]
        if not local:
            continue
        li = torch.tensor(local, device=q.device)
        ki = torch.div(li, g, rounding_mode="floor")
        b_i = bias[:, li] if bias is not None and bias.dim() == 4 and bias.shape[1] > 1 else bias
        sub_heads = tuple(heads[j] for j in local)
        outs.append(fn(take(q, 1, li), take(k, 1, ki), take(v, 1, ki), pattern.patterns[i], sub_heads, b_i, ctx))
        order.extend(local)
    inverse = torch.empty(len(order), dtype=torch.long, device=q.device)
    inverse[torch.tensor(order, device=q.device)] = torch.arange(len(order), device=q.device)
    return permute(torch.cat(outs, 1), 1, inverse)


def _interleaved_heads(q, k, v, pattern: PerHead, bias, fn, ctx: dict) -> Tensor:
    """The common case of ``per_head_attention``: all heads, group i = heads i, i + n, ...
    Those are strided views (head = j * n + i), so the groups are split with ``unbind``
    (whose backward is one ``stack``) and merged with ``stack`` (whose backward is views),
    with none of the general path's zero-filled, scatter-added head gradients.
    With grouped-query heads (g query heads per kv head, n dividing g) every group
    still spans all kv heads, with g / n of its query heads on each."""
    n, (b, h, L, e), h_kv = len(pattern.patterns), q.shape, k.shape[1]
    g = h // h_kv
    qs = q.unflatten(1, (h // n, n)).unbind(2)
    if g == 1:
        ks, vs = (t.unflatten(1, (h_kv // n, n)).unbind(2) for t in (k, v))
    else:
        ks, vs = (k,) * n, (v,) * n
    if bias is not None and bias.dim() == 4 and bias.shape[1] > 1:
        bs = bias.unflatten(1, (h // n, n)).unbind(2)
    else:
        bs = (bias,) * n
    ops = fused_blocks.usable(q)
    groups = [split(p) for p in pattern.patterns]
    # Only for this kernel's own groups: another kernel (flex) passing ``fn`` must run its own.
    if fn is sparse_attention and ops is not None and g == 1 and bias is None and all(len(gr) == 1 for gr in groups):
        # One node: each group's kernel writes its heads of one output and gradient in place.
        plans = [group_plan(qs[i], ks[i], *groups[i][0], tuple(range(i, h, n)), ctx, ops) for i in range(n)]
        return fused_blocks.attend_head_groups(ops, q, k, v, plans, ctx["key_padding"], ctx["scale"],
                                               ctx["dropout_p"])
    # The compiled kernel reads the strided head views in place; SDPA's tiles want dense copies.
    dense = (lambda t: t) if ops is not None else (lambda t: t.contiguous())  # noqa: E731
    outs = [fn(dense(qs[i]), dense(ks[i]), dense(vs[i]), pattern.patterns[i],
               tuple(range(i, h, n)), bs[i], ctx) for i in range(n)]
    return torch.stack(outs, 2).flatten(1, 2)


def group_plan(q, k, query_order, parts, heads, ctx, ops):
    """The block plan of one softmax group (cached by ``get_plan``)."""
    per_head = parts_per_head(parts)
    return get_plan(parts, query_order, q.shape[2], k.shape[2], ctx["q_offset"], ctx["block"],
                    heads if per_head else None, q.device, fold=1 if per_head else q.shape[1] // k.shape[1],
                    engine=cost_engine(ops is not None, q.dtype))


def attend_group(q, k, v, query_order, parts, heads, bias, ctx, want_lse: bool):
    """One softmax over a plan: returns (out (b, h, n, e), lse (b, h, n) | None, live)."""
    b, h, n, e = q.shape
    per_head = parts_per_head(parts)
    ops = fused_blocks.usable(q)
    plan = group_plan(q, k, query_order, parts, heads, ctx, ops)
    if ops is not None:  # the compiled kernel: tiles read in place, one call per group
        out, lse = fused_blocks.attend(ops, q, k, v, plan, ctx["key_padding"], bias, ctx["scale"], ctx["dropout_p"])
        return out, (lse if want_lse else None), None
    qv = q if plan.q_identity else reorder(q, 2, plan.q_index, ((0, plan.q_index.numel(), plan.q_slot),))
    if plan.k_identity:
        kv, vv = k, v
    else:
        pieces = tuple((start, pad, inv) for (start, inv), pad in zip(plan.key_slots(), plan.k_pads))
        kv, vv = (reorder(t, 2, plan.k_index, pieces) for t in (k, v))
    kp = ctx["key_padding"]
    kp = None if kp is None else kp.index_select(1, plan.k_index)
    tiles = PerHeadTiles(plan, qv, kv, vv) if per_head else SharedTiles(plan, qv, kv, vv)
    outs, lses, lives, rows = [], [], [], []
    for bk in plan.buckets:
        qt, kt, vt, allowed = tiles.gather(bk, kp)
        plain = kp is None and bias is None
        if plain and bk.causal_diagonal and qt.shape[-2] == kt.shape[-2] and not want_lse:
            # A tile that only sees itself causally: the flash kernel skips the upper half.
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, dropout_p=ctx["dropout_p"],
                                                 scale=ctx["scale"])
        else:
            if plain:
                mask = _additive(bk, allowed, q.dtype)
            else:
                mask = (torch.zeros((), dtype=q.dtype, device=q.device) if bias is None
                        else tiles.bias(bk, bias).to(q.dtype))
                mask = mask.masked_fill(~allowed, torch.finfo(q.dtype).min)
            if want_lse:
                out, lse = attention_with_lse(qt, kt, vt, mask, ctx["scale"], ctx["dropout_p"])
                lses.append(tiles.scatter(lse[..., None]))
            else:
                out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, dropout_p=ctx["dropout_p"],
                                                     scale=ctx["scale"])
        outs.append(tiles.scatter(out))
        if kp is not None:
            lives.append(tiles.scatter(allowed.any(-1, keepdim=True).expand(*qt.shape[:-1], 1)))
        rows.append(bk.rows)
    natural = tiles.natural(None if len(rows) == 1 and plan.buckets[0].all_rows else torch.cat(rows))
    out = natural(_cat(outs, tiles.row_dim))
    lse = natural(_cat(lses, tiles.row_dim))[..., 0] if want_lse else None
    if kp is not None:
        live = natural(_cat(lives, tiles.row_dim))
    else:
        live = None if plan.all_live else plan.row_any[None, :, :, None]
    return out, lse, live


def _additive(bk, allowed: Tensor, dtype) -> Tensor:
    """The pattern's additive mask (0 / most negative finite), kept on the bucket when
    small: it depends only on the plan, so rebuilding it every call is wasted work."""
    key = (dtype, tuple(allowed.shape))
    mask = bk.cache.get(key)
    if mask is None:
        # One pass (where) rather than zeros + negate + masked_fill: bigbird's per-head
        # masks at 16K are 75M elements, rebuilt every call.
        mask = torch.where(allowed, torch.zeros((), dtype=dtype, device=allowed.device),
                           torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device))
        if mask.numel() <= _CACHED_MASK_ELEMENTS:
            bk.cache[key] = mask
    return mask


def _cat(ts: list, dim: int) -> Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts, dim)


def _mul(out: Tensor, live: Tensor | None) -> Tensor:
    return out if live is None else out * live


def union_weights(lses: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over a union of groups = sum_g exp(lse_g - lse) softmax_g. ``lses`` (G, ...) ->
    (lse, the G weights exp(lse_g - lse)). A row that sees no key in a group has lse_g = -inf
    or the dtype's lowest (padding, a -inf bias); flooring it at a finite value gives it weight 0
    and keeps logsumexp's backward from reading -inf - -inf = NaN. The compiled path
    merges inside its kernels (``fused_blocks.FusedUnion``)."""
    lses = lses.clamp_min(torch.finfo(lses.dtype).min / 2)
    lse = torch.logsumexp(lses, 0)
    return lse, torch.exp(lses - lse)
