"""YAML and JSON read with bounds: a user's file becomes plain data or one ``ValueError``.

Two inputs break a plain ``yaml.safe_load`` / ``json.loads``: an alias bomb (a few hundred
bytes whose anchors nest ``[*a, *a, ...]`` nine levels deep expand to hundreds of millions of
nodes once anything walks the result, e.g. an error message printing it) and a deeply nested
document (``[[[[...]]]]``), whose recursive composer or decoder raises ``RecursionError``.
YAML is therefore scanned as events first, counting the nodes the document expands to and
its depth, before anything is composed; JSON has no aliases, so its depth is checked after a
decode that may itself hit the recursion limit.
"""
from __future__ import annotations

import json
from typing import Any

import yaml

MAX_DEPTH = 64            # a config or run file nests a few levels; 64 leaves room
MAX_NODES = 100_000       # nodes a YAML document may expand to, aliases counted as their copies
MAX_BYTES = 16 << 20      # no config, meta.json or plan.json comes near this


def _too_big(where: str, n: int) -> ValueError:
    return ValueError(f"{where} is {n} bytes; a config or run file is far smaller (at most {MAX_BYTES} bytes), "
                      f"so this is not one: check the path")


def check_yaml(text: str, where: str) -> None:
    """Refuse a YAML text that nests deeper than ``MAX_DEPTH`` or expands (aliases included)
    to more than ``MAX_NODES`` nodes, without composing it."""
    if len(text) > MAX_BYTES:
        raise _too_big(where, len(text))
    sizes: dict[str, int] = {}
    stack: list[list] = [[None, 0]]  # [anchor, nodes so far] per open collection
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) - 1 > MAX_DEPTH:
                raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels; flatten it (a config has "
                                 f"sections of settings, a few levels deep)")
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, n = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, n = None, sizes.get(event.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        total += n if isinstance(event, yaml.AliasEvent) else 1
        if total > MAX_NODES or stack[-1][1] > MAX_NODES:
            raise ValueError(f"{where} expands to more than {MAX_NODES} values (YAML aliases '*name' copy "
                             f"their anchor's whole subtree); write the values out or drop the aliases")


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` after ``check_yaml``; a syntax error is a ValueError naming ``where``."""
    try:
        check_yaml(text, where)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{where} is not valid YAML: {' '.join(str(e).split())}") from e
    except RecursionError as e:  # not reached after check_yaml; kept so no traceback escapes
        raise ValueError(f"{where} nests too deeply to read; flatten it") from e


def check_depth(obj: Any, where: str, limit: int = MAX_DEPTH) -> Any:
    """``obj`` unchanged if its lists and dicts nest at most ``limit`` deep (walked without recursion)."""
    todo = [(obj, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            if depth >= limit:
                raise ValueError(f"{where} nests deeper than {limit} levels; it was not written by tfamily "
                                 f"(the file is corrupt or hand-edited)")
            todo.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return obj


def load_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)`` bounded in size and depth; any failure is a ValueError naming ``where``
    (``json.JSONDecodeError`` is one, so callers that catch it keep working)."""
    if len(text) > MAX_BYTES:
        raise _too_big(where, len(text))
    try:
        data = json.loads(text)
    except RecursionError as e:
        raise ValueError(f"{where} nests too deeply to read; it was not written by tfamily (the file is corrupt "
                         f"or hand-edited)") from e
    return check_depth(data, where)
