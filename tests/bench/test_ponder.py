"""`tfamily plot ponder`: ponder time per position of a halting Universal Transformer."""
from __future__ import annotations

import json

import pytest

from tfamily import cli

TINY = ["--member", "universal_transformer_lm", "model.d_model=32", "model.heads.n_heads=2",
        "model.depth.n_layers=4", "data.seq_len=16", "train.batch_size=4", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "--steps", "2"]


@pytest.fixture(scope="module")
def ut_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ponder") / "ut"
    assert cli.main(["train", *TINY, "--out", str(out), "--json"]) == 0
    return out


def test_ponder_per_position_is_written_plotted_and_bounded(ut_run, tmp_path, capsys):
    png = tmp_path / "ponder.png"
    text = "ROMEO: hi"
    assert cli.main(["plot", "ponder", str(ut_run), "--text", text, "--out", str(png), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert png.stat().st_size > 0 and json.loads(png.with_suffix(".json").read_text()) == printed
    assert printed["tokens"] == list(text)
    (row,) = printed["depths"]
    assert row["max_steps"] == 4 and 1 <= row["steps_executed"] <= 4
    assert len(row["ponder"]) == len(text)
    for n, r, p in zip(row["n_updates"], row["remainders"], row["ponder"]):
        # t2t: at least one update, at most max_steps; ponder = updates + remainder.
        assert 1 <= n <= row["max_steps"] and 0 <= r <= 1 and p == pytest.approx(n + r, abs=1e-5)


@pytest.mark.parametrize("argv, words", [
    ([], ["exactly one of --text", "--ids"]),
    (["--text", ""], ["--text is empty"]),
    (["--ids", "1 x"], ["--ids must be space-separated integers"]),
])
def test_bad_ponder_input_is_one_line(ut_run, argv, words, capsys):
    assert cli.main(["plot", "ponder", str(ut_run), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err


def test_a_model_without_halting_is_refused(tmp_path, capsys):
    out = tmp_path / "gpt"
    assert cli.main(["train", *[a if a != "universal_transformer_lm" else "gpt" for a in TINY],
                     "model.position.max_len=16", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["plot", "ponder", str(out), "--text", "hi"]) == 2
    assert "has no dynamic halting" in capsys.readouterr().err
