"""Attention patterns. A new pattern registers its constructor in ``PATTERNS``
(``tfamily.registry``): the spec's valid pattern names and parameter keys come from there.
Fixed patterns are plain objects; the adaptive span (``adaptive_span``) is learned per head,
so the builder makes it with the head shape and it registers beside its code."""
from ...registry import PATTERNS
from .adaptive_span import AdaptiveSpan, SoftPatternKernel
from .base import (BlockCandidates, HeadDependent, LengthDependent, Order, Pattern, Reordered, SoftPattern,
                   at_length, candidates, dense_mask, density, is_per_head, key_order, query_order)
from .basic import Causal, Full

from .bigbird import RandomBlocks, bigbird, longformer
from .bigbird_itc import BigBirdITC
from .combine import Difference, Intersect, PerHead, Union
from .factorized import FixedBlock, FixedSummary, StridedColumns, factorized, fixed, strided
from .local import GlobalTokens, Local1D, Local2D, SlidingWindow
from .order import Residue, SummaryFirst


def resolve(spec, layer: int = 0):
    """A pattern from a spec: a ``PatternSpec``, a ``{"name", "params"}`` dict, or a pattern.

    Constructors taking ``layer`` (BigBird's random blocks, seeded per layer) get the
    layer index unless the params fix it. Combinators below resolve their sub-specs
    through here, so ``{"name": "union", "params": {"patterns": [...]}}`` nests.
    """
    if isinstance(spec, Pattern):
        return spec
    if isinstance(spec, dict):
        bad = set(spec) - {"name", "params", "per_layer"}
        if bad or "name" not in spec:
            raise ValueError(f"a pattern spec is a dict with 'name' and optional 'params', got {spec!r}")
        name, params = spec["name"], spec.get("params") or {}
    else:
        name, params = spec.name, spec.params
    entry = PATTERNS.entry(name)
    if entry.needs:
        raise ValueError(f"pattern {name!r} is learned per head and is built by the model "
                         f"(tfamily.build), not nested inside another pattern")
    PATTERNS.check_params(name, params, where="pattern params")
    params = dict(params)
    if "layer" not in params and "layer" in (entry.params() or ()):
        params["layer"] = layer
    return entry.make(**params)


def _union(patterns=({"name": "causal"},), layer: int = 0, name: str = "union"):
    return Union(*(resolve(p, layer) for p in patterns), name=name)


def _intersect(patterns=({"name": "causal"},), layer: int = 0, name: str = "intersect"):
    return Intersect(*(resolve(p, layer) for p in patterns), name=name)


def _per_head(patterns=({"name": "causal"},), layer: int = 0, name: str = "per_head"):
    return PerHead([resolve(p, layer) for p in patterns], name=name)


for _name, _make in {
    "full": Full, "causal": Causal,
    "sliding_window": SlidingWindow, "global_tokens": GlobalTokens, "longformer": longformer,
    "local_1d": Local1D, "local_2d": Local2D,
    "strided_columns": StridedColumns, "strided": strided,
    "fixed_block": FixedBlock, "fixed_summary": FixedSummary, "fixed": fixed,
    "random_blocks": RandomBlocks, "bigbird": bigbird, "bigbird_itc": BigBirdITC,
    "union": _union, "intersect": _intersect, "per_head": _per_head,
}.items():
    PATTERNS.register(_name, _make)

__all__ = ["Pattern", "BlockCandidates", "Reordered", "HeadDependent", "SoftPattern", "Order",
           "LengthDependent", "at_length", "candidates", "is_per_head", "query_order", "key_order", "dense_mask",
           "density", "Full", "Causal",
           "PATTERNS", "resolve",
           "SlidingWindow", "GlobalTokens", "Local1D", "Local2D",
           "StridedColumns", "FixedBlock", "FixedSummary", "strided", "fixed", "factorized",
           "RandomBlocks", "bigbird", "BigBirdITC", "longformer", "Union", "Intersect", "Difference", "PerHead",
           "Residue", "SummaryFirst", "AdaptiveSpan", "SoftPatternKernel"]
