"""The one mechanism every command's settings go through: a dataclass whose fields are declared
with :func:`setting` becomes command-line flags (:func:`add_flags`), is built from nested dicts
(config files, dotted ``key=value`` overrides, a checkpoint's saved config) with unknown keys
refused (:func:`build`), and is checked field by field from its types and bounds (:func:`check`),
every error one line that names the key (or the flag) and the valid values.

How to declare a command's settings
-----------------------------------
1. Write a dataclass in ``tfamily/settings/`` (or beside the command if it imports nothing that
   needs torch) with one field per setting, each ``name: type = setting(default, help=...)``::

       @dataclass
       class EvalSettings:
           checkpoint: str = setting(None, positional="DIR", help="run directory or checkpoint directory")
           split: str = setting("val", flag=True, choices=("val", "test"))
           max_tokens: int | None = setting(None, flag=True, lo=1, help="score at most this many tokens")

   The type gives the flag's type and the check (``int``: an integer, ``float``: a finite number,
   ``bool``: true or false, ``dict``: a mapping, ``list[int]``: ``nargs="+"``; ``| None``: null
   allowed); ``lo``/``hi``/``lo_open`` bound numbers; ``choices`` lists the valid strings;
   ``words`` are strings allowed beside a number (``"auto"``); ``check=fn(key, value)`` replaces the
   type's check where a setting needs its own message; ``check=False`` leaves it to the library
   function that takes the value (its message names the argument). ``flag=True`` makes ``--max-tokens``;
   ``flag="--steps"`` (or a tuple ``("-c", "--config")``) names it; ``old=("--max-steps",)`` keeps
   older names working with a deprecation note; ``parse=fn`` reads the flag's text where the type's
   own reading does not (argparse's ``type``: ``options.seconds`` takes ``90s`` or ``5m`` as a
   float); a nested dataclass field is a config section.
2. In the command's ``add_parser``: ``add_flags(p, EvalSettings)``. Values given on the command
   line are checked before the command runs (each error names the flag); the command reads
   ``args.max_tokens`` as before. A run's config keys that have a flag (``train.max_steps`` is
   ``--steps``) are added with ``add_flags(p, Config, overrides=True)`` and read back as dotted
   overrides with :func:`given`.
3. A config section is built with ``build(Config, tree)`` then ``check(cfg)``; files and dotted
   overrides become that tree through :func:`tree` (OmegaConf merges them, so ``${...}``
   interpolation works). Checks across fields (exactly one of two keys) stay in a short function
   beside the dataclass.

Why plain argparse and not jsonargparse: our flags are argparse's (one-line errors, ``-c NAME`` of
a packaged config, ``key=value`` overrides in any order, the short names users know), and
jsonargparse needed an adapter (positionals moved by hand, its errors rewritten, its nested result
flattened) to behave that way; argparse plus the dataclass fields needs none. ``Parser`` in
``tfamily/cli.py`` adds only what argparse lacks: one-line errors, options named in full, a
``KEY=VALUE`` list intermixed with options, and subcommands declared when named.
"""
from __future__ import annotations

import argparse
import copy
import functools
import types
import typing
from dataclasses import MISSING, Field, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from ..base.numbers import check_flag, check_int, check_number, cut
from ..base.options import renamed


def setting(default: Any = MISSING, *, help: str = "", flag: bool | str | tuple = False, old: tuple = (),
            positional: str | None = None, metavar: str | None = None, choices: tuple | None = None,
            lo=None, hi=None, lo_open: bool = False, words: tuple = (), check=None, what: str = "",
            hint: str = "", nargs=None, repeat: bool = False, negatable: bool = False, required: bool = False,
            parse=None) -> Field:
    """A dataclass field carrying its declaration (see the module docstring)."""
    meta = dict(help=help, flag=flag, old=old, positional=positional, metavar=metavar, choices=choices, lo=lo,
                hi=hi, lo_open=lo_open, words=words, check=check, what=what, hint=hint, nargs=nargs, repeat=repeat,
                negatable=negatable, required=required, parse=parse)
    if isinstance(default, (list, dict)):
        return field(default_factory=functools.partial(copy.deepcopy, default), metadata=meta)
    return field(default=default, metadata=meta)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _kinds(tp) -> tuple[tuple, bool]:
    """The non-None types of an annotation (``list[int]`` as ``list``) and whether None is allowed."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    kinds = tuple(typing.get_origin(a) or a for a in args if a is not type(None))
    return kinds, type(None) in args


def _default(f: Field):
    return f.default_factory() if f.default_factory is not MISSING else f.default


# -- dicts -> dataclasses ---------------------------------------------------------------------------

def build(cls, d: Any, where: str = ""):
    """``cls`` from a nested dict (missing keys keep their defaults); an unknown key, or a section
    that is not a mapping, is refused naming the valid ones. Checks: :func:`check`."""
    if not isinstance(d, dict):
        if where:
            raise TypeError(f"config section {where!r} must be a mapping, got {cut(d)}")
        raise TypeError(f"a config must be a mapping, got {type(d).__name__}")
    valid = [f.name for f in fields(cls)]
    bad = sorted(set(d) - set(valid), key=str)
    if bad:
        what = f"unknown {where} key(s)" if where else "unknown config section(s)"
        raise ValueError(f"{what} {bad}; valid: {', '.join(valid)}")
    kw = {}
    for f in fields(cls):
        if f.name in d:
            hint, value = _hints(cls)[f.name], d[f.name]
            key = f"{where}.{f.name}" if where else f.name
            if is_dataclass(hint):
                value = build(hint, value, key)
            elif hint is tuple and isinstance(value, list):
                value = tuple(value)
            kw[f.name] = copy.deepcopy(value)
    return cls(**kw)


def check(obj, where: str = "", name=None) -> None:
    """Every field of ``obj`` (recursing into sections) checked by its declaration; ``name(f, key)``
    says how an error names the setting (default: its dotted key)."""
    for f in fields(obj):
        key = f"{where}.{f.name}" if where else f.name
        value = getattr(obj, f.name)
        if is_dataclass(value):
            check(value, key, name)
        else:
            check_value(name(f, key) if name else key, value, f.metadata, _hints(type(obj))[f.name])


def check_value(key: str, value: Any, m, hint) -> None:
    """One setting's value against its declaration ``m`` and type ``hint``."""
    kinds, none = _kinds(hint)
    if m.get("check") is False:
        return
    if m.get("check"):
        m["check"](key, value)
        return
    if (value is None and none) or (isinstance(value, str) and value in m.get("words", ())):
        return
    null = none and not key.startswith("-")  # a config key may be null; a flag is given or not
    words = " or ".join(repr(w) for w in m.get("words", ()))
    hint_ = m.get("hint") or (f"or {words}" if words else "")
    if m.get("choices") is not None and list not in kinds:  # a list's items are checked below
        if value not in m["choices"]:
            raise ValueError(f"{key}={value!r} is not valid; valid: {', '.join(map(str, m['choices']))}")
    elif bool in kinds:
        if none and not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false (or null{': ' + m['what'] if m.get('what') else ''}), "
                            f"got {cut(value)}")
        check_flag(key, value)
    elif int in kinds:
        check_int(key, value, m.get("lo"), m.get("hi"), none=null, hint=hint_)
    elif float in kinds:
        check_number(key, value, m.get("lo"), m.get("hi"), lo_open=m.get("lo_open", False), none=null, hint=hint_)
    elif dict in kinds and not isinstance(value, dict):
        raise TypeError(f"{key if '.' in key else f'config section {key!r}'} must be a mapping, got {cut(value)}")
    elif list in kinds:
        if not isinstance(value, list):
            raise TypeError(f"{key} must be a list, got {cut(value)}")
        (item,) = typing.get_args(hint if typing.get_origin(hint) is list else
                                  next(a for a in typing.get_args(hint) if typing.get_origin(a) is list)) or (Any,)
        for v in value:
            check_value(key, v, {**m, "check": None}, item)
    elif str in kinds and not isinstance(value, str):
        raise TypeError(f"{key} must be {m.get('what') or 'a string'}, got {cut(value)}")


# -- dataclasses -> flags ---------------------------------------------------------------------------

def _names(f: Field) -> tuple[str, ...]:
    flag = f.metadata.get("flag")
    if flag is True:
        return (f"--{f.name.replace('_', '-')}",)
    return (flag,) if isinstance(flag, str) else tuple(flag or ())


def dest(f: Field) -> str:
    """The attribute a flag's value lands on: the long flag's name (``--steps`` -> ``steps``)."""
    names = _names(f)
    return names[-1].lstrip("-").replace("-", "_") if names else f.name


def flagged(cls, where: str = ""):
    """``(field, dotted key)`` of every field of ``cls`` (and its sections) that is a flag or a positional."""
    for f in fields(cls):
        key = f"{where}.{f.name}" if where else f.name
        hint = _hints(cls)[f.name]
        if is_dataclass(hint):
            yield from flagged(hint, key)
        elif _names(f) or f.metadata.get("positional"):
            yield f, key, hint


def add_flags(parser, cls, *, overrides: bool = False, defaults: dict | None = None) -> None:
    """One argparse argument per flagged field of ``cls``. With ``overrides`` (a run's config keys)
    a flag not given is None, and :func:`given` turns the given ones into dotted overrides; else
    each flag's default is the field's (or ``defaults[name]``: the same declaration in another
    command), and the values are checked after parsing (``check_args``)."""
    for f, key, hint in flagged(cls):
        m, kinds = f.metadata, _kinds(hint)[0]
        default = (defaults or {}).get(f.name, _default(f))
        kw = dict(help=with_default(m["help"], default, escape=False) if overrides else m["help"])
        if m.get("metavar"):
            kw["metavar"] = m["metavar"]
        if m.get("choices") is not None:
            kw["choices"] = m["choices"]
        if bool in kinds:
            kw["action"] = argparse.BooleanOptionalAction if m.get("negatable") else "store_true"
        else:
            item = typing.get_args(hint if list in kinds and typing.get_origin(hint) is list else
                                   next((a for a in typing.get_args(hint) if typing.get_origin(a) is list), hint))
            kind = item[0] if list in kinds and item else str if str in kinds else int if int in kinds \
                else float if float in kinds else str
            kw["type"] = m.get("parse") or kind
            if m.get("repeat"):
                kw["action"] = "append"
            elif list in kinds:
                kw["nargs"] = m.get("nargs") or "+"
        if m.get("positional"):
            kw["metavar"] = m["positional"]
            if list in kinds:
                kw["nargs"] = m.get("nargs") or "*"
            parser.add_argument(f.name, default=None if overrides else default, **kw)
            continue
        if m.get("required"):
            kw["required"] = True
        action = parser.add_argument(*_names(f), dest=dest(f), default=None if overrides else default, **kw)
        if m.get("old"):
            renamed(parser, action, *m["old"])
    if not overrides:
        parser.set_defaults(settings_=(*(parser.get_default("settings_") or ()), cls))


def with_default(text: str, default: Any, escape: bool = True) -> str:
    """An option's help with its default, where the default says something (not null, false or
    empty) and the help does not name it already; ``%`` kept literal for argparse."""
    if escape and "%(" not in text:
        text = text.replace("%", "%%")
    if default in (None, False, [], (), argparse.SUPPRESS) or "default" in text:
        return text
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f"{text} (default: {shown})".strip()


def check_args(args: argparse.Namespace) -> None:
    """The values of every settings class declared with :func:`add_flags`, each error naming its flag."""
    for cls in getattr(args, "settings_", ()):
        for f, key, hint in flagged(cls):
            value = getattr(args, dest(f) if _names(f) else f.name)
            if value is not None or not _kinds(hint)[1]:
                check_value(_names(f)[-1] if _names(f) else f.metadata["positional"], value, f.metadata, hint)


def given(args: argparse.Namespace, cls) -> dict[str, Any]:
    """The dotted overrides (``{"train.max_steps": 7}``) of ``cls``'s flags given on the command line."""
    return {key: getattr(args, dest(f)) for f, key, _ in flagged(cls) if getattr(args, dest(f), None) is not None}


# -- files and key=value overrides -------------------------------------------------------------------

def find_file(name: str | Path, dirs: list[Path], what: str = "config") -> Path:
    """A file by path, or by name (with or without .yaml/.yml/.toml) in ``dirs``, first found."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    tried = [p]
    for base in dict.fromkeys(dirs):
        for suffix in ("", ".yaml", ".yml", ".toml"):
            q = base / f"{name}{suffix}"
            tried.append(q)
            if q.is_file():
                return q
    available = sorted({q.stem for base in dirs if base.is_dir() for q in base.iterdir()
                        if q.suffix in (".yaml", ".yml", ".toml")})
    raise FileNotFoundError(f"{what} {str(name)!r} not found (tried {', '.join(map(str, tried))}); "
                            f"available {what}s: {', '.join(available) or 'none'}")


def read_file(path: str | Path, sections: list[str]) -> dict:
    """The raw dict of a YAML or TOML file, which must be a mapping."""
    path = Path(path)
    from ..base.textload import load_toml, load_yaml, read_text  # YAML only once a file is read
    text = read_text(path)
    d = (load_toml(text, str(path)) if path.suffix == ".toml" else load_yaml(text, str(path))) or {}
    if not isinstance(d, dict):
        raise ValueError(f"{path} must hold a mapping with sections {', '.join(sections)}")
    return d


def parse_value(text: str) -> Any:
    """A command-line value as YAML; '3e-3' (a string to YAML 1.1) becomes a float."""
    try:
        from ..base.textload import load_yaml
        v = load_yaml(text, f"the value {text[:40]!r}")
    except ValueError as e:
        if "not valid YAML" in str(e):
            return text
        raise
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def parse_overrides(items: list[str], sections: list[str], example: str) -> dict[str, Any]:
    """['train.lr=3e-3', 'model.d_model=128'] -> {'train.lr': 0.003, 'model.d_model': 128}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or key.strip() != key:
            raise ValueError(f"override {item!r} is not key=value; e.g. {example.split(', ')[0]}")
        if key.split(".")[0] not in sections:
            raise ValueError(f"override key {key!r} must start with one of {', '.join(sections)} (e.g. {example})")
        if not value.strip():  # YAML reads nothing as null: `key=''` in a shell silently unset the key
            raise ValueError(f"override {item!r} has no value (a shell turns {key}='' into that); give a "
                             f"value, or {key}=null to unset it")
        out[key] = parse_value(value)
    return out


_ABSENT = object()


def tree(layers: list[dict], overrides: dict[str, Any]) -> dict:
    """``layers`` merged in order (mappings recurse, anything else is replaced), then each dotted
    override set (intermediate mappings created), as a plain dict with ``${key}`` references
    resolved. Merging and setting are OmegaConf's; its errors become one ValueError."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    try:
        merged = OmegaConf.merge(*map(OmegaConf.create, layers))
        for key, value in overrides.items():
            parts = key.split(".")
            for i in range(1, len(parts)):  # OmegaConf.update would replace a value with a mapping
                node = OmegaConf.select(merged, ".".join(parts[:i]), default=_ABSENT)
                if node is not _ABSENT and not isinstance(node, DictConfig):
                    raise ValueError(f"override {key!r}: {parts[i - 1]!r} is {node!r}, not a mapping; make "
                                     f"{parts[i - 1]!r} a mapping of settings in the config, or drop the override")
            OmegaConf.update(merged, key, value, merge=False)
        return OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as e:
        raise ValueError(f"config key {getattr(e, 'full_key', '') or '(top)'}: {str(e).splitlines()[0]}") from e
