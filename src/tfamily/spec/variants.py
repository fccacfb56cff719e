"""Member variants: one rule that turns any member's preset into a related model, the same way for
every member.

``two_sided(pattern, seq_len)`` is a member's bidirectional encoder, Long Range Arena's setting
(Tay et al. 2021, section 4: every model is an encoder over the whole input). The decoder members
(GPT, the Sparse Transformers, Longformer, BigBird, Reformer) carry causal patterns; their encoder
keeps the pattern's shape and drops its causal restriction:

* ``causal`` becomes ``full`` (GPT's and the Reformer's pattern: the Reformer's LSH buckets then
  reach both ways, Kitaev et al. 2020, section 2);
* every pattern with a ``causal`` parameter gets ``causal=False``: the strided and fixed patterns
  (Child et al. 2019) see their columns and blocks on both sides, global tokens see and are seen
  by every position, BigBird's window becomes its blocked two-sided window and its random blocks
  are drawn among all ``ceil(seq_len / block)`` key blocks (Zaheer et al. 2020, section 2);
* a sliding window of ``w`` keys (Longformer's ``window``) becomes ``w / 2`` keys on each side
  (Beltagy et al. 2020, section 3.1), so a query sees about as many keys as the decoder's did;
* unions, intersections, per-head mixes and per-layer lists are rewritten part by part.

A pattern with no two-sided form (the Image Transformer's query blocks with their memory flange,
the adaptive span) is refused naming it.
"""
from __future__ import annotations

import inspect
import math

from ..registry import PATTERNS

NESTED = ("union", "intersect", "per_head")    # params["patterns"] are pattern specs
HALF_WINDOW = ("sliding_window", "longformer")  # window = keys a causal query sees


def _default(name: str, param: str):
    p = inspect.signature(PATTERNS.entry(name).make).parameters.get(param)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def two_sided(pattern: dict, seq_len: int) -> dict:
    """The pattern spec dict ``pattern`` (``{"name", "params"[, "per_layer"]}``) without its causal
    restriction at ``seq_len`` (the module docstring's rule)."""
    name, params = pattern["name"], dict(pattern.get("params") or {})
    out = {"name": name, "params": params}
    if pattern.get("per_layer"):
        out["per_layer"] = [two_sided(p, seq_len) for p in pattern["per_layer"]]
    if name == "causal":
        return {**out, "name": "full", "params": {}}
    if name == "full":
        return out
    if name in NESTED:
        params["patterns"] = [two_sided(p, seq_len) for p in params.get("patterns", _default(name, "patterns"))]
        return out
    keys = PATTERNS.entry(name).params() or ()
    if "causal" not in keys:
        raise ValueError(f"pattern {name!r} has no two-sided form (its blocks only look back); run the member as a "
                         f"decoder classifier (arena: --causal, or the member as NAME:causal)")
    params["causal"] = False
    if name in HALF_WINDOW:
        params["window"] = params.get("window", _default(name, "window")) // 2 + 1
    if "n_blocks" in keys and params.get("n_blocks") is None:
        params["n_blocks"] = math.ceil(seq_len / params.get("block", _default(name, "block")))
    return out
