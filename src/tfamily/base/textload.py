"""YAML and JSON read with bounds: a user's file becomes plain data or one ``ValueError``.

Two inputs break a plain ``yaml.safe_load`` / ``json.loads``: an alias bomb (a few hundred
bytes whose anchors nest ``[*a, *a, ...]`` nine levels deep expand to hundreds of millions of
nodes once anything walks the result, e.g. an error message printing it) and a deeply nested
document (``[[[[...]]]]``), whose recursive composer or decoder raises ``RecursionError``.
YAML is therefore scanned as events first, counting the nodes the document expands to and
its depth, before anything is composed; JSON has no aliases, so its depth is checked after a
decode that may itself hit the recursion limit. TOML is bounded the same way: its values are
counted on the text before ``tomllib`` builds them (a 10^6-element list takes seconds to parse).

Every file tfamily reads (configs, run and checkpoint metadata, a checkpoint directory's JSON,
data files) goes through ``read_text`` / ``read_json`` / ``read_yaml`` / ``read_jsonl`` /
``read_csv`` here, and its fields through ``require``: the file is bounded in bytes, a UTF-8 BOM
is stripped, a non-UTF-8 byte is refused at its offset, and a missing or wrong-typed field is one
``ValueError`` naming the file and the key, never a ``KeyError`` or ``AttributeError`` later.
"""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from .numbers import cut

MAX_DEPTH = 64            # a config or run file nests a few levels; 64 leaves room
MAX_NODES = 100_000       # nodes a YAML or TOML document may expand to, aliases counted as their copies
MAX_BYTES = 16 << 20      # no config, meta.json or plan.json comes near this

# libyaml's parser when PyYAML has it: it scans the 10^5 events of the node bound in 0.2 s, not 4 s.
_YAML = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _too_big(where: str, n: int, limit: int = MAX_BYTES) -> ValueError:
    return ValueError(f"{where} is {n} bytes; a config or run file is far smaller (at most {limit} bytes), "
                      f"so this is not one: check the path")


class _Duplicate(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key)
        self.key, self.line = key, line


class _Loader(_YAML):  # type: ignore[misc, valid-type]
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping (YAML says keys are
    unique; PyYAML silently keeps the last, so a repeated section would drop the first's settings)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise _Duplicate(key, key_node.start_mark.line + 1)
                    seen.add(key)
                except TypeError:  # an unhashable key: the base constructor names it
                    pass
        return super().construct_mapping(node, deep=deep)


def check_yaml(text: str, where: str) -> None:
    """Refuse a YAML text that nests deeper than ``MAX_DEPTH`` or expands (aliases included)
    to more than ``MAX_NODES`` nodes, without composing it."""
    if len(text) > MAX_BYTES:
        raise _too_big(where, len(text))
    sizes: dict[str, int] = {}
    stack: list[list] = [[None, 0]]  # [anchor, nodes so far] per open collection
    total, aliases = 0, False
    for event in yaml.parse(text, Loader=_YAML):
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
            anchor, n, aliases = None, sizes.get(event.anchor, 1), True
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        total += n if isinstance(event, yaml.AliasEvent) else 1
        if total > MAX_NODES or stack[-1][1] > MAX_NODES:
            if aliases:
                raise ValueError(f"{where} expands to more than {MAX_NODES} values (YAML aliases '*name' copy "
                                 f"their anchor's whole subtree); write the values out or drop the aliases")
            raise _too_many(where)


def _too_many(where: str) -> ValueError:
    return ValueError(f"{where} holds more than {MAX_NODES} values; a config or run file holds a few hundred "
                      f"settings, so this is not one: check the path (data belongs in a data file)")


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` after ``check_yaml``, a key repeated in one mapping refused; a
    syntax error is a ValueError naming ``where``."""
    try:
        check_yaml(text, where)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except _Duplicate as e:
        raise ValueError(f"{where} gives key {cut(e.key)} twice (line {e.line}); YAML keys are unique: keep "
                         f"one") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{where} is not valid YAML: {' '.join(str(e).split())[:400]}") from e
    except RecursionError as e:  # not reached after check_yaml; kept so no traceback escapes
        raise ValueError(f"{where} nests too deeply to read; flatten it") from e


# TOML: strings and comments dropped, each value follows one of '=', ',', '[' or '{' (an array's
# first item its '[', the others a ',', a table header one '['), so their count bounds the values.
_TOML_NOISE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')
_TOML_STARTS = re.compile(r"[=,\[{]")


def load_toml(text: str, where: str) -> dict:
    """``tomllib.loads(text)`` with YAML's bounds (bytes, values, depth); any failure a ValueError naming ``where``."""
    if len(text) > MAX_BYTES:
        raise _too_big(where, len(text))
    try:
        import tomllib
    except ModuleNotFoundError as e:  # Python 3.10
        raise ValueError(f"{where}: TOML configs need Python 3.11+; use a YAML config") from e
    if len(_TOML_STARTS.findall(_TOML_NOISE.sub("", text))) > MAX_NODES:
        raise _too_many(where)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where} is not valid TOML: {str(e)[:400]}") from e
    except RecursionError as e:
        raise ValueError(f"{where} nests too deeply to read; flatten it") from e
    check_depth(data, where)
    return data


def check_depth(obj: Any, where: str, limit: int = MAX_DEPTH, nodes: int | None = None) -> Any:
    """``obj`` unchanged if its lists and dicts nest at most ``limit`` deep (walked without
    recursion) and, with ``nodes``, hold at most that many values."""
    todo = [(obj, 0)]
    seen = 0
    while todo:
        node, depth = todo.pop()
        seen += 1
        if nodes is not None and seen > nodes:
            raise _too_many(where)
        if isinstance(node, (dict, list)):
            if depth >= limit:
                raise ValueError(f"{where} nests deeper than {limit} levels; the file is corrupt or hand-edited "
                                 f"(no file tfamily reads nests this deep)")
            todo.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return obj


def load_json(text: str | bytes, where: str, limit: int = MAX_BYTES) -> Any:
    """``json.loads(text)`` bounded in size (``limit``) and depth; any failure is a ValueError naming
    ``where`` (``json.JSONDecodeError`` is one, so callers that catch it keep working)."""
    if len(text) > limit:
        raise _too_big(where, len(text), limit)
    if isinstance(text, bytes):
        text = decode(text, where)
    try:
        data = json.loads(text)
    except RecursionError as e:
        raise ValueError(f"{where} nests too deeply to read; the file is corrupt or hand-edited") from e
    except json.JSONDecodeError as e:  # still a JSONDecodeError, its line naming the file
        e.args = (f"{where} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); the file is corrupt "
                  f"or hand-edited",)
        raise
    return check_depth(data, where)


# -- files ---------------------------------------------------------------------------------------
def decode(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text, a leading BOM (Windows editors write one) dropped; a byte that is
    not UTF-8 is refused with its offset."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start + bom
        raise ValueError(f"{where} is not UTF-8 text (byte {at} is {data[at:at + 1]!r}); save it as UTF-8") from None


def read_bytes(path: str | Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``, refused before reading when over ``limit``."""
    path = Path(path)
    size = path.stat().st_size
    if size > limit:
        raise _too_big(str(path), size, limit)
    with open(path, "rb") as f:
        data = f.read(limit + 1)  # the file may grow between stat and read
    if len(data) > limit:
        raise _too_big(str(path), len(data), limit)
    return data


def read_text(path: str | Path, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of ``path`` (see ``read_bytes`` and ``decode``)."""
    return decode(read_bytes(path, limit), str(path))


def read_json(path: str | Path, kind: type | tuple = dict, limit: int = MAX_BYTES) -> Any:
    """The JSON value of ``path``, which must be a ``kind`` (a JSON object by default)."""
    return expect(load_json(read_text(path, limit), str(path), limit), kind, str(path))


def read_yaml(path: str | Path, kind: type | tuple = dict) -> Any:
    """The YAML document of ``path`` (empty: ``{}``), which must be a ``kind``."""
    data = load_yaml(read_text(path), str(path))
    return expect({} if data is None else data, kind, str(path))


def read_jsonl(path: str | Path, limit: int = MAX_BYTES) -> list[dict]:
    """One JSON object per non-blank line of ``path``; a bad line is named by its number."""
    rows = []
    for i, line in enumerate(read_text(path, limit).splitlines(), 1):
        if line.strip():
            where = f"{path} line {i}"
            rows.append(expect(load_json(line, where), dict, where))
    return rows


def read_csv(path: str | Path, limit: int = MAX_BYTES) -> list[dict]:
    """The rows of the CSV file ``path`` (a header line, then one row a line) as dicts."""
    text = read_text(path, limit)
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, limit))  # csv's own 128 KiB field limit, raised to the file's byte bound
    try:
        return list(csv.DictReader(text.splitlines(keepends=True)))
    except csv.Error as e:
        raise ValueError(f"{path} is not valid CSV ({e}); save it as comma-separated text") from None
    finally:
        csv.field_size_limit(old)


def read_cache(path: str | Path, parse, what: str, limit: int = MAX_BYTES) -> Any:
    """``parse(text)`` of the cache file ``path`` that tfamily wrote for itself, or None when there is
    none. A corrupt one (unreadable, over ``limit``, not UTF-8, or refused by ``parse`` with a
    ValueError, TypeError or KeyError) is named on stderr and removed, and None returned: the
    caller rebuilds it, as if it had never been written."""
    import contextlib
    import sys
    path = Path(path)
    try:
        return parse(read_text(path, limit))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as e:
        print(f"tfamily: note: the cached {what} {path} is corrupt ({cut(' '.join(str(e).split()), 160)}); "
              f"removed and rebuilt", file=sys.stderr)
        with contextlib.suppress(OSError):
            path.unlink()
        return None


# -- fields --------------------------------------------------------------------------------------
_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
          bool: "true or false", type(None): "null"}
MISSING: Any = object()


def _name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:  # an int counts as a float
        kinds = tuple(k for k in kinds if k is not int)
    return " or ".join(_NAMES.get(k, k.__name__) for k in kinds)


def _is(value: Any, kind: type | tuple) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):  # JSON's true is not the number 1
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return isinstance(value, kinds)


def expect(value: Any, kind: type | tuple, where: str, fix: str = "the file is corrupt or hand-edited") -> Any:
    """``value`` if it is a ``kind`` (an int counts as a float, a bool as neither), else one line naming ``where``."""
    if not _is(value, kind):
        raise ValueError(f"{where} must be {_name(kind)}, got {cut(value)}; {fix}")
    return value


def require(d: Any, key: str, kind: type | tuple, where: str, default: Any = MISSING,
            fix: str = "the file is corrupt or hand-edited") -> Any:
    """``d[key]`` checked to be a ``kind`` (``default`` when absent, if given); ``where`` names the
    file (and the part of it that ``d`` is). A missing key or a wrong type is one ValueError."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a mapping (with key {key!r}), got {cut(d)}; {fix}")
    if key not in d:
        if default is not MISSING:
            return default
        raise ValueError(f"{where} has no {key!r}; {fix}")
    value = d[key]
    if not _is(value, kind):
        raise ValueError(f"{where} field {key}={cut(value)} must be {_name(kind)}; {fix}")
    return value


def number(d: Any, key: str, where: str, default: Any = MISSING, fix: str = "re-save the file") -> float:
    """``require(d, key, (int, float))`` that is also finite; a string such as ``"1e4"`` is refused by name."""
    value = require(d, key, (int, float), where, default, fix)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} field {key}={value!r} must be a finite number; {fix}")
    return value
