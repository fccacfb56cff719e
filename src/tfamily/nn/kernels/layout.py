"""Block layouts: which key tiles each query tile must visit, planned once per
(pattern, lengths, offset, block size, heads, device) and cached; ``block_size="auto"``
picks the tile size by a cost model. What a plan holds is in ``plan``, how one is built in
``plan_build``; this module caches them, chooses among them, and splits a pattern into
plan groups.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

import torch

from ..patterns import Difference, Union, is_per_head, key_order, query_order
from .plan import EMPTY, FULL, Bucket, Plan
from .plan_build import build_plan, coarsen_plan

__all__ = ["AUTO_BLOCKS", "AUTO_BLOCKS_COMPILED", "AUTO_SIZES", "EMPTY", "FULL", "PLANS", "ROW_COSTS", "Bucket", "Plan",
           "PlanCache", "build_plan", "coarsen_plan", "cost_engine", "get_plan", "parts_per_head", "plan_cost", "split"]


class PlanCache:
    """Least-recently-used plans; ``builds`` counts how many were computed."""

    def __init__(self, size: int = 64):
        self.size, self.builds, self._plans = size, 0, OrderedDict()

    def get(self, key, build):
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = build()
        self.builds += 1
        self._plans[key] = plan
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return plan

    def discard(self, key) -> None:
        self._plans.pop(key, None)

    def clear(self) -> None:
        self._plans.clear()


PLANS = PlanCache(size=32)


def get_plan(parts: tuple, query_order, n: int, m: int, q_offset: int, block: int | str,
             heads: tuple | None, device: torch.device, fold: int = 1, engine: str = "tiles") -> Plan:
    """``parts``: disjoint patterns, each read from its own key copy (its ``key_order``).
    ``block="auto"`` picks the tile size with the lowest modelled cost (``plan_cost``) for the
    engine that runs it (a key of ``ROW_COSTS``, see ``cost_engine``); ``fold`` is how many
    query heads share a tile (grouped-query heads)."""
    if block == "auto":
        key = (parts, query_order, n, m, q_offset, heads, str(device), fold, engine)
        block = _BEST.get(key)
        if block is None:
            costs = _auto_costs(parts, query_order, n, m, q_offset, heads, device, fold, engine)
            block = min(costs, key=costs.get)
            _BEST[key] = block
            for b in costs:  # the losing candidates' plans need not sit in the cache
                if b != block:
                    PLANS.discard(_plan_key(parts, query_order, n, m, q_offset, b, heads, device))
    return PLANS.get(_plan_key(parts, query_order, n, m, q_offset, block, heads, device),
                     lambda: build_plan(parts, query_order, n, m, q_offset, block, heads, device))


def _plan_key(parts, query_order, n, m, q_offset, block, heads, device) -> tuple:
    return parts, query_order, n, m, q_offset, block, heads, str(device)


# Tile sizes tried by block="auto", and the relative cost per computed score (forward +
# backward) by query rows per tile, per engine (``cost_engine``), all measured at e=64 on the
# 2-core CPUs, torch 2.13.
# "tiles": fused SDPA on gathered tiles: the CPU flash kernel splits queries into chunks of 32
# below 192 rows, 64 below 768 and 256 above, so short tiles run below peak. Dense causal SDPA
# is ~1.0.
# "fused": the compiled kernel (csrc/blocksparse.cpp) in fp32 or fp64. It scores a query tile
# against up to 512 keys per GEMM, so its cost per score hardly depends on the tile: sliding
# window 256 at 4K, 1 thread, 1.05 (64), 1.00 (128), 1.05 (256); 32-row tiles cost more per
# score but halve the waste of narrow windows (strided at 4K: 137 ms at 32, 164 at 64). It does
# not fold grouped heads into a tile, so ``fold`` does not change its rows.
# "fused_amx_bf16": the same kernel in bf16 where the CPU has AMX (MKL's bf16 GEMM on AMX
# tiles). Its small products pay more per call: over the ten bench patterns at 16K, 2 threads,
# two runs, the time per computed score of 32-row tiles was 1.21-1.54x (median 1.38) that of
# 64-row ones, against 0.97-1.30x (median 1.11) in fp32 (`python experiments/attention/blocksparse_block_ab.py
# --dtype bfloat16 --patterns <the ten>`; experiments/attention/block_ab_bf16_xeon/).
AUTO_BLOCKS = (64, 128, 256)
AUTO_BLOCKS_COMPILED = (32, 64, 128, 256)
_ROW_COST = ((64, 2.6), (128, 1.5), (256, 1.15), (512, 1.07))
_ROW_COST_COMPILED = ((32, 1.2), (64, 1.05), (128, 1.0), (256, 1.05))
ROW_COSTS = {"tiles": _ROW_COST, "fused": _ROW_COST_COMPILED,
             "fused_amx_bf16": ((32, 1.55), (64, 1.1), (128, 1.0), (256, 1.05))}
AUTO_SIZES = {"tiles": AUTO_BLOCKS, "fused": AUTO_BLOCKS_COMPILED, "fused_amx_bf16": AUTO_BLOCKS_COMPILED}
_BEST: dict = {}


def cost_engine(compiled: bool, dtype: torch.dtype) -> str:
    """Which ``ROW_COSTS`` table models a call: SDPA on gathered tiles, or the compiled (CPU-only)
    kernel, whose bf16 tiles on an AMX CPU have their own table. bf16 elsewhere (AVX512-BF16
    without AMX, or emulated on AVX2) was not measured apart and keeps the fp32 table."""
    if not compiled:
        return "tiles"
    if dtype == torch.bfloat16 and _has_amx():
        return "fused_amx_bf16"
    return "fused"


@functools.lru_cache(maxsize=1)
def _has_amx() -> bool:
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe()) if probe is not None else False


def _per_score(block: int, fold: int, engine: str) -> float:
    rows = block if engine != "tiles" else block * fold
    return next((c for r, c in ROW_COSTS[engine] if rows <= r), 1.0)


def plan_cost(plan: Plan, fold: int = 1, engine: str = "tiles") -> float:
    """Modelled time of a plan: computed scores weighted by the per-score cost of tiles
    with that many query rows."""
    return _per_score(plan.block, fold, engine) * fold * sum(bk.scores for bk in plan.buckets)


def _auto_costs(parts, query_order, n, m, q_offset, heads, device, fold, engine) -> dict:
    """``plan_cost`` of the candidate tile sizes, smallest first, stopping once no larger one can
    win. A larger candidate (a multiple of the smaller: its tiles are unions of theirs, over the
    same virtual axes) has every live smaller tile inside one of its live tiles, so its scores are
    at least the smaller plan's live area (live tiles x B^2, bucket padding left out): that times
    the cheapest per-score cost still to come bounds every larger candidate's cost from below.
    When the bound is no better than the best cost so far, the rest are not built; the pick is
    the one the full search makes (bigbird at 64K: the 256-row candidate took half the first
    call's 40 s of planning). The larger candidates are coarsened from the first one
    (``coarsen_plan``), so the patterns' masks are evaluated once."""
    sizes = [b for b in AUTO_SIZES[engine] if b <= max(n, 64)]
    costs: dict = {}
    fine = None
    for i, b in enumerate(sizes):
        if fine is None or b % fine.block:
            plan = fine = get_plan(parts, query_order, n, m, q_offset, b, heads, device)
        else:  # from the finest plan, without evaluating the masks again
            plan = PLANS.get(_plan_key(parts, query_order, n, m, q_offset, b, heads, device),
                             lambda: coarsen_plan(fine, parts, query_order, n, m, q_offset, b, heads, device))
        costs[b] = plan_cost(plan, fold, engine)
        rest = sizes[i + 1:]
        if not rest or any(r % b for r in rest):
            continue
        live = sum(int(bk.live.sum()) for bk in plan.buckets) * b * b
        bound = min(_per_score(r, fold, engine) for r in rest) * fold * live
        if bound >= min(costs.values()):
            break
    return costs


@functools.lru_cache(maxsize=256)
def parts_per_head(parts: tuple) -> bool:
    """Whether any part's mask depends on the head (cached: Protocol checks walk the
    attributes on every call, and this runs on every attention call)."""
    return any(is_per_head(p) for p in parts)


@functools.lru_cache(maxsize=256)
def split(pattern) -> tuple:
    """Plan groups for a pattern: ``[(query_order, parts), ...]``.

    A union whose members need different orders is split: members sharing a query
    order form one group (one softmax), members of a group with different key orders
    read different key copies. Each member loses what earlier members allow, so a
    key is never counted twice when groups are merged by log-sum-exp.
    """
    members = _flatten(pattern)
    orders = [(query_order(p), key_order(p)) for p in members]
    if len(set(orders)) == 1:
        return ((query_order(pattern), (pattern,)),)
    by_query: OrderedDict = OrderedDict()
    for p, (qo, ko) in zip(members, orders):
        by_query.setdefault(qo, OrderedDict()).setdefault(ko, []).append(p)
    groups, earlier = [], []
    for qo, by_key in by_query.items():
        parts = []
        for ms in by_key.values():
            part = ms[0] if len(ms) == 1 else Union(*ms)
            parts.append(Difference(part, tuple(earlier)) if earlier else part)
            earlier.extend(ms)
        groups.append((qo, tuple(parts)))
    return tuple(groups)


def _flatten(pattern) -> list:
    if type(pattern) is Union:
        return [m for p in pattern.patterns for m in _flatten(p)]
    return [pattern]
