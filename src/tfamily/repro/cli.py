"""`tfamily repro NAME`: one paper reproduction from ``REPROS``, imported only when run."""
from __future__ import annotations

from ..bench.cli import group
from . import REPROS


def add_parser(sub) -> None:
    group(sub, "repro", "reproduce a paper's experiment", REPROS)
