"""The arena's one-line errors: each bad input is answered by one line naming the value and the fix,
exit status 2, and nothing written to --out."""
from __future__ import annotations

import pytest

from tfamily import cli

TINY = ["--length", "listops=24", "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "4",
        "--eval-examples", "16"]
ROWS = [
    (["--members", "longformr"], ["unknown member 'longformr'", "did you mean 'longformer'?", "tfamily members"]),
    (["--tasks", "pathfindr"], ["unknown arena task 'pathfindr'", "did you mean 'pathfinder'?", "tasks: listops"]),
    (["--members", "transformer_xl", "--as-papers"], ["member transformer_xl cannot be an arena classifier"]),
    (["--members", "gpt", "transformer_xl"], ["transformer_xl changes nothing in attention", "--as-papers"]),
    (["--members", "image_transformer_1d"], ["image_transformer_1d cannot be an arena classifier",
                                             "NAME:causal runs its decoder"]),
    (["--members", "gpt", "--time", "0.001"], ["--time 0.001 cannot fit one evaluation",
                                               "16 validation examples", "fewer --eval-examples"]),
    (["--steps", "5", "--time", "1m"], ["give --steps or --time, not both"]),
    (["--preset", "arena-gpu"], ["'arena-gpu'", "arena-cpu"]),
]


def _main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # a usage error: argparse exits
        return e.code


@pytest.mark.parametrize("argv, words", ROWS, ids=[" ".join(a) for a, _ in ROWS])
def test_arena_refuses_in_one_line(argv, words, tmp_path, capsys):
    out = tmp_path / "out"
    assert _main(["arena", *TINY, *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err
    assert not out.exists()


@pytest.mark.parametrize("what, words", [("missing", ["does not exist", "--out of an arena run"]),
                                         ("empty", ["no finished arena cells", "tfamily arena"])])
def test_report_refuses_in_one_line(what, words, tmp_path, capsys):
    d = tmp_path / what
    if what == "empty":
        d.mkdir()
    assert cli.main(["arena", "report", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err
    assert not (d / "report.html").exists()
