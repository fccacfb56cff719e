"""One declaration, everything from it: flags (with old names and defaults in help), checks with
one-line messages, dicts built with unknown keys refused, dotted overrides and ${...} references;
and what the lab commands need: a flag read by its own function (``parse``), a list flag with
choices checked item by item."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tfamily import cli
from tfamily.cli import Parser
from tfamily.base.options import deprecated, seconds
from tfamily.settings.schema import add_flags, build, check, check_args, given, setting, tree


@dataclass
class _Lab:
    time: float = setting(300.0, flag=True, metavar="DUR", parse=seconds)
    kinds: list[str] = setting(["a", "b"], flag=True, choices=("a", "b", "c"))


def _parse(argv):
    p = cli.Parser(prog="lab")
    add_flags(p, _Lab)
    args = p.parse(argv)
    check_args(args)
    return args


def test_parse_reads_the_flag_and_list_choices_are_checked_per_item():
    args = _parse(["--time", "5m", "--kinds", "c", "a"])
    assert (args.time, args.kinds) == (300.0, ["c", "a"])
    assert _parse([]).kinds == ["a", "b"]
    with pytest.raises(SystemExit):
        _parse(["--time", "soon"])
    with pytest.raises(ValueError, match=r"kinds='d' is not valid; valid: a, b, c"):
        check(build(_Lab, {"kinds": ["a", "d"]}))


@dataclass
class Inner:
    rate: float = setting(1e-3, lo=0.0, lo_open=True, flag="--rate", old=("--learning-rate",), help="step size")
    every: int | str | None = setting("auto", lo=1, words=("auto",))


@dataclass
class Outer:
    name: str = setting("x", choices=("x", "y"), flag=True)
    inner: Inner = field(default_factory=Inner)


@dataclass
class Command:
    paths: list[str] = setting([], positional="PATH", nargs="+")
    count: int = setting(3, flag=True, lo=1, help="how many")
    quiet: bool = setting(False, flag=True)


def _parser(cls, **kw) -> Parser:
    p = Parser(prog="t")
    add_flags(p, cls, **kw)
    return p


def test_flags_carry_the_declared_defaults_types_and_old_names(capsys):
    p = _parser(Command)
    args = p.parse_args(["a", "--count", "5", "b"])
    assert (args.paths, args.count, args.quiet) == (["a", "b"], 5, False)
    assert "how many (default: 3)" in " ".join(p.format_help().split())
    q = _parser(Outer, overrides=True)
    assert deprecated(q) == {"--learning-rate": "--rate"}
    assert given(q.parse_args(["--learning-rate", "0.5"]), Outer) == {"inner.rate": 0.5}
    assert "--learning-rate is deprecated; use --rate" in capsys.readouterr().err
    assert given(q.parse_args([]), Outer) == {}
    assert "step size (default: 0.001)" in " ".join(q.format_help().split())


def test_values_are_checked_naming_the_flag_or_the_key():
    args = _parser(Command).parse_args(["a", "--count", "0"])
    with pytest.raises(ValueError, match=r"--count must be an integer >= 1, got 0"):
        check_args(args)
    with pytest.raises(ValueError, match=r"inner.every must be an integer >= 1 or null, got 0; or 'auto'"):
        check(build(Outer, {"inner": {"every": 0}}))
    with pytest.raises(ValueError, match=r"name='z' is not valid; valid: x, y"):
        check(build(Outer, {"name": "z"}))
    check(build(Outer, {"inner": {"every": "auto", "rate": 2}}))


def test_build_refuses_unknown_keys_and_sections_that_are_not_mappings():
    with pytest.raises(ValueError, match=r"unknown inner key\(s\) \['rat'\]; valid: rate, every"):
        build(Outer, {"inner": {"rat": 1}})
    with pytest.raises(ValueError, match=r"unknown config section\(s\) \['outer'\]; valid: name, inner"):
        build(Outer, {"outer": {}})
    with pytest.raises(TypeError, match="config section 'inner' must be a mapping, got 3"):
        build(Outer, {"inner": 3})


def test_files_and_overrides_merge_with_references():
    d = tree([{"inner": {"rate": 0.1}}, {"name": "y"}], {"inner.every": "${inner.rate}"})
    assert d == {"inner": {"rate": 0.1, "every": 0.1}, "name": "y"}
