"""`tfamily members`, and the CLI's error contract: a user error is one line on
stderr and exit status 2, never a traceback."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfamily import cli, members

AXES = {"pattern", "kernel", "position", "heads", "residual", "depth", "state", "feed_forward", "objective",
        "init", "dropout"}


def test_members_json_lists_every_member(capsys):
    assert cli.main(["members", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and {r["name"] for r in rows} == set(members.REGISTRY)
    for r in rows:
        assert r["paper"] and set(r["choices"]) == AXES
    gpt = next(r for r in rows if r["name"] == "gpt")
    assert gpt["paper"].startswith("Radford") and gpt["choices"]["pattern"] == "causal"


def test_members_table_and_name_filter(capsys):
    assert cli.main(["members"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in members.REGISTRY)
    assert cli.main(["members", "bert", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["bert"]


def test_unknown_member_is_one_line_exit_2(capsys):
    assert cli.main(["members", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "tfamily members: error: unknown member 'nope'; valid members:" in captured.err
    assert "gpt" in captured.err and "Traceback" not in captured.err


def test_command_errors_become_one_line(monkeypatch, capsys):
    def broken(args):
        raise TypeError("d_model must be an integer, got 'x'")
    monkeypatch.setattr(cli, "_members", broken)
    assert cli.main(["members"]) == 2
    assert capsys.readouterr().err == "tfamily members: error: d_model must be an integer, got 'x'\n"


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: tfamily" in capsys.readouterr().out


def test_bad_option_is_an_argparse_error():
    with pytest.raises(SystemExit) as e:
        cli.main(["members", "--bogus"])
    assert e.value.code == 2


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "tfamily"
    if script.exists():
        return [str(script)]
    found = shutil.which("tfamily")
    return [found] if found else [sys.executable, "-m", "tfamily.cli"]


def test_console_script():
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    ok = subprocess.run(_console_script() + ["members", "--json"], capture_output=True, text=True,
                        env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert {r["name"] for r in json.loads(ok.stdout)} == set(members.REGISTRY)
    bad = subprocess.run(_console_script() + ["members", "nope"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "unknown member 'nope'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_version(capsys):
    import tfamily
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"tfamily {tfamily.__version__}\n"


def test_each_help_line_is_the_commands_own():
    # `tfamily --help` lists the commands from cli.COMMANDS without importing their modules
    full = cli.make_parser()
    (sub,) = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert {a.dest: a.help for a in sub._choices_actions} == {name: line for name, (_, line) in cli.COMMANDS.items()}


_PROBE = """
import sys
from tfamily.cli import main
for argv in (["--help"], ["--version"], ["compare", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
import tfamily.members, tfamily.build  # the submodule must not shadow the package's build function
assert callable(tfamily.build), tfamily.build
"""


def test_help_and_version_do_not_import_torch():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: tfamily" in done.stdout and "tfamily compare" in done.stdout
    assert "torch imported: False" in done.stderr
