"""Option names every command shares, durations, and how a renamed option keeps working.

The same thing has the same name in every command that has it:

    --steps   how many steps to train (optimiser steps; environment steps in `rl`)
    --time    a wall-clock budget: 300, 90s, 5m or 1.5h
    --out     where the results go (a run directory or a file)
    --seed    the random seed
    --device  where to run: cpu, cuda, ...
    --size    the model's size preset

An older name stays accepted through :func:`renamed`: it does exactly what the new option does
and prints one line on stderr naming the new one. This module imports no torch, so every
parser can use it without slowing `tfamily --help`.
"""
from __future__ import annotations

import argparse
import math
import re
import sys

CANONICAL = ("--steps", "--time", "--out", "--seed", "--device", "--size")
# Older names of the canonical options, as the test of every parser knows them.
SYNONYMS = {"--steps": ("--max-steps", "--train-steps"), "--time": ("--time-budget", "--budget", "--budget-s"),
            "--out": ("--output", "--out-dir"), "--seed": (), "--device": (), "--size": ()}


class _Renamed(argparse.Action):
    """A hidden option that notes its new name on stderr, then acts as the new option does."""

    def __init__(self, option_strings, dest, *, target: argparse.Action, **kw):
        super().__init__(option_strings, dest, **kw)
        self.target = target

    def __call__(self, parser, namespace, values, option_string=None):
        new = self.target.option_strings[-1]
        print(f"{parser.prog}: note: {option_string} is deprecated; use {new}", file=sys.stderr)
        self.target(parser, namespace, values, new)


def renamed(parser, new: str | argparse.Action, *old: str) -> None:
    """Keep each ``old`` option string working on ``parser`` (a ``tfamily.cli.Parser``) as a hidden
    alias of the option ``new`` (its name or the action ``add_argument`` returned): same value, type
    and choices, one note on stderr. Given under both names, the command line is refused
    (``Parser.parse_known_args``): argparse would keep whichever came last."""
    target = parser.flags[new] if isinstance(new, str) else new
    for name in old:
        same = {k: getattr(target, k) for k in ("nargs", "type", "choices", "metavar")
                if getattr(target, k) is not None}
        parser.add_argument(name, action=_Renamed, target=target, dest=target.dest, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS, **same)
        parser.old_names[name] = target.option_strings[-1]


def deprecated(parser) -> dict[str, str]:
    """``{old: new}`` for every renamed option of ``parser``."""
    return dict(parser.old_names)


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value, what: str = "time budget") -> float | None:
    """'5m' -> 300.0, '90s' / '90' / 90 -> 90.0, '1.5h' -> 5400.0, None -> None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", str(value))
        if not m:
            raise ValueError(f"{what}={value!r} is not a duration; use e.g. 300, 90s, 5m or 1.5h")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a positive, finite duration, got {value!r}; use e.g. 300, 90s, 5m "
                         f"or 1.5h, or leave it unset and stop with max_steps")
    return seconds


def seconds(text: str) -> float:
    """argparse type of a ``--time`` given in seconds: a number as it is (the command checks its
    range: 0 is no limit in some), or a duration such as 90s, 5m or 1.5h."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text, "--time")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
