"""The one merge of nested dicts: a spec over a member's base, a size's overrides over a preset, a
checkpoint's config fields over a family's fixed choices all layer the same way."""
from __future__ import annotations

import copy
from collections.abc import Mapping


def deep_merge(*dicts: Mapping) -> dict:
    """``dicts`` layered left to right: where both sides hold a mapping the two merge, anything else
    (a number, a string, a list) is replaced by the later value. The result is a new dict that
    shares nothing with its inputs, so a caller may change it without touching a preset."""
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            if not isinstance(v, Mapping):
                out[k] = copy.deepcopy(v)
            elif isinstance(out.get(k), Mapping):
                out[k] = deep_merge(out[k], v)
            else:
                out[k] = deep_merge(v)
    return out
