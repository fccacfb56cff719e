"""Declarations the lab commands need: a flag read by its own function (``parse``), a list flag
with choices checked item by item."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from tfamily import cli
from tfamily.options import seconds
from tfamily.settings.schema import add_flags, build, check, check_args, setting


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
