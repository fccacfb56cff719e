"""The catalogue of small things that used to pass without a word or point the wrong way: each input
is refused in one line naming the value and the fix (exit status 2, no traceback), or does what
its help says (an unknown command, conflicting old and new flag names, `--stop "\\n"`, Ctrl-C naming
the resume command, the tour of a recurrent member quoting its own papers)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfamily import cli, tour

LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.threads=1",
      "train.precision=fp32"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("leftovers") / "lm"
    assert cli.main(["train", *LM, "--steps", "2", "--out", str(out)]) == 0
    return out


def _refused(capsys, argv: list[str], words: list[str]) -> str:
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:  # a usage error, from the parser
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    for w in words:
        assert w in err, (w, err)
    return err


# -- silent acceptance ended ----------------------------------------------------------------------

def test_an_empty_override_value_is_refused_not_read_as_null(capsys, tmp_path):
    # `train.init_from=''` in a shell arrives as `train.init_from=`, which YAML read as null: the run
    # trained from scratch without a word.
    _refused(capsys, ["train", *LM, "--steps", "1", "train.init_from=", "--out", str(tmp_path / "r")],
             ["'train.init_from='", "no value", "train.init_from=null"])
    assert not (tmp_path / "r" / "checkpoints").exists()


@pytest.mark.parametrize("argv", [["--steps", "3", "--max-steps", "5"], ["--max-steps=5", "--steps", "3"]])
def test_an_option_under_its_old_and_new_name_is_refused(argv, capsys, tmp_path):
    # argparse kept the last one: `--steps 3 --max-steps 5` trained 5 steps
    _refused(capsys, ["train", *LM, *argv, "--out", str(tmp_path / "r")],
             ["--steps 3", "--max-steps 5", "give only --steps"])


# -- the first hour's leftovers -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["nosuch", "--help"], ["nosuch"], ["tarin", "-h"]])
def test_an_unknown_command_exits_2_naming_it(argv, capsys):
    capsys.readouterr()
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert not out.out, "the top help was printed instead of an error"
    assert f"unknown command {argv[0]!r}" in out.err and "train" in out.err and out.err.count("\n") == 1
    if argv[0] == "tarin":
        assert "did you mean `tfamily train`" in out.err


def test_bench_help_summaries_end_at_a_sentence():
    from tfamily.bench.cli import BENCHES, first_doc_line
    for name, module in BENCHES.items():
        line = first_doc_line(module)
        assert line and line.endswith("."), (name, line)


def test_members_columns_are_aligned(capsys):
    capsys.readouterr()
    assert cli.main(["members"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    rows = [re.split(r"\s{2,}", line, maxsplit=2) for line in lines]
    assert len(rows) > 20 and all(len(r) == 3 for r in rows), [r for r in rows if len(r) != 3]
    model = {line.index(r[1], len(r[0])) for line, r in zip(lines, rows)}
    paper = {line.index(r[2], m + len(r[1])) for line, r, m in zip(lines, rows, sorted(model) * len(rows))}
    assert len(model) == 1 and len(paper) == 1, (model, paper)


@pytest.mark.parametrize("member", ["lstm_lm", "rnn_lm", "gru_lm"])
def test_a_recurrent_members_tour_quotes_its_own_equations(member):
    stops = {s.axis: s.citation for s in tour.tour(member) if s.axis in ("model", "objective")}
    for axis, citation in stops.items():
        assert "Radford" not in citation, (member, axis, citation)
        assert "Mikolov et al. 2010" in citation, (member, axis, citation)
    assert "Radford" in {s.axis: s.citation for s in tour.tour("gpt")}["model"]


def test_ctrl_c_names_the_command_that_resumes_the_run(tmp_path, monkeypatch, capsys):
    from tfamily.train import loop
    real = loop.train

    def interrupted_after(cfg, **kw):
        real(cfg, **kw)
        raise KeyboardInterrupt
    monkeypatch.setattr(loop, "train", interrupted_after)
    out = tmp_path / "r"
    capsys.readouterr()
    assert cli.main(["train", *LM, "--steps", "2", "train.ckpt_every=1", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "interrupted" in err and "step 2" in err and f"`tfamily train --resume {out}`" in err, err


def test_ctrl_c_before_any_checkpoint_says_there_is_none(tmp_path, monkeypatch, capsys):
    from tfamily.train import loop

    def interrupted(cfg, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(loop, "train", interrupted)
    capsys.readouterr()
    assert cli.main(["train", *LM, "--steps", "2", "--out", str(tmp_path / "r")]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no checkpoint was written yet" in err and str(tmp_path / "r") in err, err


def test_stop_backslash_n_means_a_newline(run, capsys):
    capsys.readouterr()
    args = ["generate", str(run), "--tokens", "200", "--prompt", "a", "--threads", "1"]
    assert cli.main([*args, "--stop", "\\n"]) == 0
    stopped = capsys.readouterr().out
    assert cli.main(args) == 0
    full = capsys.readouterr().out
    assert "\n" in full[1:-1], "the sample has no newline to stop at; pick another seed"
    assert stopped == full[: full.index("\n", 1)] + "\n", (stopped, full)
