"""Every command names the same thing the same way; renamed options still work and say so."""
from __future__ import annotations

import argparse

import pytest

from tfamily import cli
from tfamily.base import options


def _leaves(parser: argparse.ArgumentParser, path=("tfamily",)):
    yield " ".join(path), parser
    for sub in (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)):
        for name, child in sub.choices.items():
            yield from _leaves(child, (*path, name))


@pytest.fixture(scope="module")
def leaves():
    return dict(_leaves(cli.make_parser()))


def _visible(parser) -> set[str]:
    return {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


def test_canonical_names_where_the_concept_exists(leaves):
    assert len(leaves) > 30
    for path, parser in leaves.items():
        names = set(parser._option_string_actions)
        for canonical, old in options.SYNONYMS.items():
            if names & {canonical, *old}:
                assert canonical in _visible(parser), f"{path}: {sorted(names & set(old))} but no {canonical}"
            assert not _visible(parser) & set(old), f"{path} shows an old name of {canonical}"
    train = _visible(leaves["tfamily train"])
    assert set(options.CANONICAL) <= train
    assert {"--time", "--out", "--seed", "--device"} <= _visible(leaves["tfamily demo"])
    for path in ("tfamily demo", "tfamily rl train", "tfamily rl sweep", "tfamily arena",
                 "tfamily repro mnist-local2d", "tfamily bench flex-floor"):
        assert "--time" in _visible(leaves[path]), path


def _required(parser) -> list[str]:
    """Values for the parser's required arguments, so one option can be parsed alone."""
    argv = []
    for a in parser._actions:
        if not a.option_strings:
            argv += [] if a.nargs in ("*", "?", argparse.PARSER) else ["x"]
        elif a.required:
            argv += [a.option_strings[0], "1"]
    return argv


def _value(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[0])]
    kind = getattr(action, "_typehint", action.type)  # jsonargparse keeps `type=` as a type hint
    return ["90s" if kind in (None, str, options.seconds) else "3"]


def test_every_renamed_option_works_and_names_the_new_one(leaves, capsys):
    seen = 0
    for path, parser in leaves.items():
        for old, new in options.deprecated(parser).items():
            target = parser._option_string_actions[new]
            value = _value(target)
            got = parser.parse([*_required(parser), old, *value])
            want = parser.parse([*_required(parser), new, *value])
            assert getattr(got, target.dest) == getattr(want, target.dest), (path, old)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"{old} is deprecated; use {new}" in err, (path, old, err)
            seen += 1
    assert seen >= 9


def test_renamed_train_flags_reach_the_config():
    from tfamily.settings.run import flag_overrides
    p = cli.make_parser(["train"])
    args = p.parse(["train", "--steps", "7", "--time", "5m", "train.lr=1e-3"])
    assert flag_overrides(args) == {"train.max_steps": 7, "train.time_budget": "5m", "train.lr": 1e-3}
    args = p.parse(["train", "train.lr=1e-3", "--steps", "7", "--time", "5m"])
    assert flag_overrides(args) == {"train.max_steps": 7, "train.time_budget": "5m", "train.lr": 1e-3}


@pytest.mark.parametrize("text,want", [("0", 0.0), ("-1", -1.0), ("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0)])
def test_seconds(text, want):
    assert options.seconds(text) == want


def test_seconds_refuses_a_word():
    with pytest.raises(argparse.ArgumentTypeError, match="5m"):
        options.seconds("soon")
