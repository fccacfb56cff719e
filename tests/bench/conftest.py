"""Shared helpers of the bench tests."""
from __future__ import annotations

import json

import pytest

from tfamily import cli


@pytest.fixture
def json_rows(capsys):
    """Run a bench command with --json: (rows, whatever it printed before the JSON list)."""
    def run(argv):
        assert cli.main(argv + ["--json"]) == 0
        out = capsys.readouterr().out
        start = 0 if out.startswith("[") else out.index("\n[") + 1  # notes print before the JSON
        return json.loads(out[start:]), out[:start]
    return run
