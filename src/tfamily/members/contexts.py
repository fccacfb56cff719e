"""Each sparse member's rule for a context shorter than its paper's (``members.Member.at_context``):
``rule(preset dict, seq_len) -> overrides`` that keep the pattern sparse there, the sizes the paper
chose scaled together. The trainer applies it once ``data.seq_len`` is known (``train/resolve.py``).
"""
from __future__ import annotations

import math
from collections.abc import Callable


def _halved(sizes: dict, fits: Callable[[dict], bool]) -> dict:
    """``sizes`` halved together (rounding up, so 0 stays 0 and 1 stays 1) until ``fits``
    them: the ratios between them, which the paper chose, stay."""
    while not fits(sizes) and any(v > 1 for v in sizes.values()):
        sizes = {k: (v + 1) // 2 for k, v in sizes.items()}
    return sizes


def stride_at(spec: dict, seq_len: int) -> dict:
    # Child et al. 2019, section 4.1: the stride l is chosen close to sqrt(n) (128 = sqrt(16384)).
    p = spec["pattern"]["params"]
    return {"pattern": {"params": {"stride": min(p["stride"], max(2, round(math.sqrt(seq_len))))}}}


def fixed_at(spec: dict, seq_len: int) -> dict:
    # The block l is the power of two nearest sqrt(n), as the paper's l = 128 is for n = 12288 (section
    # 7.3); the summary c keeps its share of l (32 of 128).
    p = spec["pattern"]["params"]
    block = min(p["block"], 2 ** max(1, round(math.log2(seq_len) / 2)))
    return {"pattern": {"params": {"block": block, "summary": max(1, block * p["summary"] // p["block"])}}}


def windows_at(spec: dict, seq_len: int) -> dict:
    # Beltagy et al. 2020, section 4.2: the staged training grows the window with the sequence length.
    layers = spec["pattern"]["per_layer"]
    sizes = _halved({"all": spec["pattern"]["params"]["window"],
                     **{i: p["params"]["window"] for i, p in enumerate(layers)}},
                    lambda s: max(s.values()) <= seq_len // 2)
    per_layer = [{**p, "params": {**p["params"], "window": sizes[i]}} for i, p in enumerate(layers)]
    return {"pattern": {"params": {"window": sizes["all"]}, "per_layer": per_layer}}


def blocks_at(spec: dict, seq_len: int) -> dict:
    # Zaheer et al. 2020, section 2: a query sees 8 blocks (3 window, 2 global, 3 random); with at
    # least 16 blocks in the context those are at most half of them.
    block = spec["pattern"]["params"]["block"]
    return {"pattern": {"params": _halved({"block": block}, lambda s: 16 * s["block"] <= seq_len)}}


def query_blocks_at(block: tuple[str, ...], flange: tuple[str, ...]) -> Callable[[dict, int], dict]:
    # Parmar et al. 2018, section 3.2: the query block and its memory flange halve together until
    # the context holds at least 4 query blocks.
    def rule(spec: dict, seq_len: int) -> dict:
        p = spec["pattern"]["params"]
        fits = lambda s: 4 * math.prod(s[k] for k in block) <= seq_len  # noqa: E731
        return {"pattern": {"params": _halved({k: p[k] for k in block + flange}, fits)}}
    return rule


def buckets_at(spec: dict, seq_len: int) -> dict:
    # Kitaev et al. 2020, section 2: about L / bucket_size buckets per round (the chunk is as long);
    # with at least 8, one round lets a query see at most about an eighth of the keys.
    size = spec["kernel"]["params"]["bucket_size"]
    return {"kernel": {"params": _halved({"bucket_size": size}, lambda s: 8 * s["bucket_size"] <= seq_len)}}
