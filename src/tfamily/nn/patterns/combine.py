"""Pattern combinators: union, intersection, difference and a pattern per head.

They are patterns themselves, so they nest; kernels read their ``patterns`` to
plan (a union whose members need different sequence orders is computed per
order and merged by log-sum-exp, a per-head mix is computed head group by group).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Pattern, candidates, is_per_head, key_order, query_order


def _same(values):
    values = list(values)
    return values[0] if values and all(v == values[0] for v in values) else None


def _fold(op, patterns: tuple, part) -> Tensor:
    """``part(p0) op part(p1) op ...``, left to right, each part computed just before it is joined."""
    out = part(patterns[0])
    for p in patterns[1:]:
        out = op(out, part(p))
    return out


def _check_patterns(owner: str, patterns) -> tuple:
    patterns = tuple(patterns)
    if not patterns:
        raise ValueError(f"{owner} needs at least one pattern, got none")
    for p in patterns:
        if not isinstance(p, Pattern):
            raise TypeError(f"{owner} takes patterns (objects with name, causal and mask_mod), "
                            f"got {type(p).__name__}")
    return patterns


@dataclass(frozen=True, init=False)
class Union:
    """A key is allowed when any member allows it (e.g. Longformer: window | global)."""
    citation = ("Child et al. 2019, eq. 4 and Zaheer et al. 2020, eq. 2's graph: a key is allowed when any part allows "
                "it")

    patterns: tuple
    name: str = "union"

    def __init__(self, *patterns, name: str = "union"):
        object.__setattr__(self, "patterns", _check_patterns("Union", patterns))
        object.__setattr__(self, "name", name)

    @property
    def causal(self) -> bool:
        return all(p.causal for p in self.patterns)

    @property
    def per_head(self) -> bool:
        return any(is_per_head(p) for p in self.patterns)

    @property
    def query_order(self):
        return _same(query_order(p) for p in self.patterns)

    @property
    def key_order(self):
        return _same(key_order(p) for p in self.patterns)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return _fold(operator.or_, self.patterns, lambda p: p.mask_mod(b, h, q_idx, kv_idx))

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        return _fold(operator.or_, self.patterns, lambda p: candidates(p, qpos, kpos, heads))


@dataclass(frozen=True, init=False)
class Intersect:
    """A key is allowed when every member allows it (e.g. a window restricted to causal)."""
    citation = ("a key is allowed when every part allows it (Child et al. 2019, section 4.2 patterns restricted to the "
                "causal half)")

    patterns: tuple
    name: str = "intersect"

    def __init__(self, *patterns, name: str = "intersect"):
        object.__setattr__(self, "patterns", _check_patterns("Intersect", patterns))
        object.__setattr__(self, "name", name)

    @property
    def causal(self) -> bool:
        return any(p.causal for p in self.patterns)

    @property
    def per_head(self) -> bool:
        return any(is_per_head(p) for p in self.patterns)

    # The intersection is a subset of each member, so any member's order keeps it sparse.
    @property
    def query_order(self):
        return next((o for p in self.patterns if (o := query_order(p))), None)

    @property
    def key_order(self):
        return next((o for p in self.patterns if (o := key_order(p))), None)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return _fold(operator.and_, self.patterns, lambda p: p.mask_mod(b, h, q_idx, kv_idx))

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        return _fold(operator.and_, self.patterns, lambda p: candidates(p, qpos, kpos, heads))


@dataclass(frozen=True)
class Difference:
    """``base`` minus every pattern in ``minus``: kernels use it to make the parts of a
    union disjoint, so no key is counted twice when parts are computed separately."""

    base: object
    minus: tuple = ()
    name: str = "difference"

    @property
    def causal(self) -> bool:
        return self.base.causal

    @property
    def per_head(self) -> bool:
        return is_per_head(self.base) or any(is_per_head(p) for p in self.minus)

    @property
    def query_order(self):
        return query_order(self.base)

    @property
    def key_order(self):
        return key_order(self.base)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = self.base.mask_mod(b, h, q_idx, kv_idx)
        for p in self.minus:
            out = out & ~p.mask_mod(b, h, q_idx, kv_idx)
        return out

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        return candidates(self.base, qpos, kpos, heads)


@dataclass(frozen=True, init=False)
class PerHead:
    """Head h uses ``patterns[h % len(patterns)]`` (Child et al. 2019, eq. 5: separate
    heads for the factorized parts; Beltagy et al. 2020: per-head dilation)."""
    citation = "Child et al. 2019, eq. 5: separate heads for the factorized parts"

    patterns: tuple
    name: str = "per_head"
    per_head = True

    def __init__(self, patterns, name: str = "per_head"):
        object.__setattr__(self, "patterns", _check_patterns("PerHead", patterns))
        object.__setattr__(self, "name", name)

    @property
    def causal(self) -> bool:
        return all(p.causal for p in self.patterns)

    def pattern_for(self, head: int):
        return self.patterns[head % len(self.patterns)]

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        out = None
        for i, p in enumerate(self.patterns):
            mine = (h % len(self.patterns) == i) & p.mask_mod(b, h, q_idx, kv_idx)
            out = mine if out is None else out | mine
        return out

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        return torch.cat([candidates(self.pattern_for(h), qpos, kpos, [h]).expand(
            1, qpos.shape[0], kpos.shape[0]) for h in heads])
