"""Every benchmark, plot and reproduction declares its settings once: its ``Settings`` dataclass
gives every option its parser has (no option added beside the declaration), checked from the
declaration before the command runs."""
from __future__ import annotations

import argparse
import importlib

import pytest

from tfamily import cli
from tfamily.bench.cli import BENCHES, PATTERNS_MODULE, PLOTS
from tfamily.repro import REPROS
from tfamily.settings.schema import dest, flagged

MODULES = sorted({*BENCHES.values(), *PLOTS.values(), PATTERNS_MODULE, *REPROS.values()} - {"tfamily.compare"})


@pytest.mark.parametrize("module", MODULES)
def test_every_option_comes_from_the_settings_declaration(module):
    mod = importlib.import_module(module)
    p = cli.Parser(prog=module)
    mod.add_args(p)
    options = {a.dest for a in p._actions if not isinstance(a, argparse._HelpAction)}  # old names share a dest
    assert options == {dest(f) if f.metadata["flag"] else f.name for f, _, _ in flagged(mod.Settings)}


def test_a_negative_count_is_refused_by_the_declaration(capsys):
    assert cli.main(["bench", "sdpa-tiles", "--threads", "-1"]) == 2
    assert "--threads must be an integer >= 0, got -1" in capsys.readouterr().err
