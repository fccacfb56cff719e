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
    from tfamily.catalogue import cli as members_cli
    monkeypatch.setattr(members_cli, "_members", broken)
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


# Every command's and every group's help; the leaves of bench, plot and repro (each its own
# benchmark module) import what they measure.
_HELPS = ["", "members", "train", "eval", "generate", "demo", "export", "compare", "download", "bench", "plot",
          "repro", "arena", "arena report", "rl", "rl train", "rl sweep", "convert"]
_PROBE = """
import sys
from tfamily.cli import main
for argv in [["--version"], *[[*c.split(), "--help"] for c in HELPS]]:
    try:
        main(argv)
    except SystemExit:
        pass
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
import tfamily.members, tfamily.build  # the submodule must not shadow the package's build function
assert callable(tfamily.build), tfamily.build
"""


def test_help_and_version_do_not_import_torch():
    done = subprocess.run([sys.executable, "-c", f"HELPS = {_HELPS!r}\n{_PROBE}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: tfamily" in done.stdout and "tfamily compare" in done.stdout
    assert "torch imported: False" in done.stderr


def test_key_value_overrides_and_options_in_any_order():
    p = cli.make_parser(["train"])
    a = p.parse(["train", "model.d_model=32", "--out", "runs/lr=1e-3", "train.lr=1e-3", "--steps", "2", "x.y=1"])
    assert a.overrides == ["model.d_model=32", "train.lr=1e-3", "x.y=1"]
    assert (a.out, a.steps, a.command, a.func.__name__) == ("runs/lr=1e-3", 2, "train", "_train")
    a = p.parse(["train", "--out=runs/b=2", "-c", "tiny", "model.d_model=32"])
    assert (a.out, a.config, a.overrides) == ("runs/b=2", "tiny", ["model.d_model=32"])


def test_nested_commands_flatten_into_one_namespace():
    p = cli.make_parser(["arena"])
    a = p.parse(["arena", "report", "somewhere", "--out", "page.html"])
    assert (a.command, a.arena_command, a.dirs, a.out, a.func.__name__) == (
        "arena", "report", ["somewhere"], "page.html", "_report")


def test_a_benchmark_module_is_imported_only_when_named():
    p = cli.make_parser(["bench"])
    (group,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    bench = group.choices["bench"]
    (inner,) = [a for a in bench._actions if isinstance(a, argparse._SubParsersAction)]
    assert all(q._build is not None for q in inner.choices.values())  # nothing declared yet
    a = p.parse(["bench", "attention", "--seq-lens", "64", "--dtype", "float32"])
    assert a.name == "attention" and a.seq_lens == [64]
    assert inner.choices["attention"]._build is None and inner.choices["lsh"]._build is not None


@pytest.mark.parametrize("argv,names", [
    (["train", "--ste", "3"], "--ste"),                      # an abbreviation: options are named in full
    (["train", "--steps", "many"], "--steps"),               # argparse's message, naming the option
    (["arena", "--lr", "x"], "--lr"),
    (["eval"], "tfamily eval: error: the following arguments are required: DIR"),  # from the subcommand
    (["export", "r"], "tfamily export: error: the following arguments are required: --format, --out"),
    (["arena", "speed"], "tfamily arena speed: error: the following arguments are required: DIR"),
])
def test_usage_errors_name_the_option_in_one_line(argv, names, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and names in err and "--help" in err, err
