"""The catalogue of small things that used to pass without a word or point the wrong way: each input
is refused in one line naming the value and the fix (exit status 2, no traceback), or does what
its help says (an unknown command, conflicting old and new flag names, `--stop "\\n"`, Ctrl-C naming
the resume command, the tour of a recurrent member quoting its own papers)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.catalogue import tour

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
    from tfamily.train import fit
    real = fit.train

    def interrupted_after(cfg, **kw):
        real(cfg, **kw)
        raise KeyboardInterrupt
    monkeypatch.setattr(fit, "train", interrupted_after)
    out = tmp_path / "r"
    capsys.readouterr()
    assert cli.main(["train", *LM, "--steps", "2", "train.ckpt_every=1", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "interrupted" in err and "step 2" in err and f"`tfamily train --resume {out}`" in err, err


def test_ctrl_c_before_any_checkpoint_says_there_is_none(tmp_path, monkeypatch, capsys):
    from tfamily.train import fit

    def interrupted(cfg, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(fit, "train", interrupted)
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


def test_labels_map_through_a_dict_and_a_class_per_row_is_refused(tmp_path, capsys):
    ids = tmp_path / "ids.csv"
    ids.write_text("text,label\n" + "".join(f"review {i},{i}\n" for i in range(200)))
    _refused(capsys, ["train", *LM, "--steps", "1", f"data.corpus={ids}", "--out", str(tmp_path / "r")],
             ["ids.csv", "200 distinct values in 200 rows", "'label'"])


@pytest.mark.parametrize("name, text, words", [
    ("empty.csv", "", ["empty.csv", "no data rows", "header only", "text,label"]),
    ("header.csv", "text,label\n", ["header.csv", "no data rows", "header only"]),
    ("empty.jsonl", "", ["empty.jsonl", "no data rows"]),
    ("object.jsonl", '{"text": "a", "label": {"x": 1}}\n{"text": "b", "label": {"x": 2}}\n',
     ["object.jsonl row 1", "{'x': 1}", "JSON object", '"label": "pos"']),
    ("list.jsonl", '{"text": "a", "label": [1]}\n{"text": "b", "label": [2]}\n', ["list.jsonl row 1", "JSON list"]),
])
def test_a_labelled_file_without_rows_or_with_object_labels_is_refused(name, text, words, tmp_path, capsys):
    (tmp_path / name).write_text(text)
    err = _refused(capsys, ["train", *LM, "--steps", "1", f"data.corpus={tmp_path / name}", "--out",
                            str(tmp_path / "r")], words)
    assert "one label ([])" not in err


def test_a_checkpoint_whose_vocabulary_does_not_fit_its_model_is_refused(run, tmp_path, capsys):
    import json
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (meta_path,) = bad.glob("checkpoints/step-*/meta.json")
    meta = json.loads(meta_path.read_text())
    chars = meta["vocab"]["chars"]
    extra = "".join(c for c in "0123456789#%()*+/<=>@[]^_{|}~" if c not in chars)
    meta["vocab"]["chars"] = "".join(sorted(chars + extra))
    meta_path.write_text(json.dumps(meta))
    # every reader of a checkpoint: they sampled garbage, scored, resumed and fine-tuned without a word
    for argv in (["generate", str(bad), "--tokens", "4"], ["eval", str(bad), "--max-tokens", "64"],
                 ["train", "--resume", str(bad), "--steps", "4"],
                 ["train", *LM, "--init-from", str(bad), "--steps", "1", "--out", str(tmp_path / "ft")]):
        capsys.readouterr()
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err
        for w in (str(meta_path), "93 tokens, more than the model's 65 embedding rows", "restore the meta.json"):
            assert w in err.strip().splitlines()[-1], (argv, w, err)


def test_eval_json_of_an_xl_run_reports_the_memory_it_used(tmp_path, capsys):
    import json
    out = tmp_path / "xl"
    assert cli.main(["train", *LM, "member=transformer_xl", "model.state.mem_len=24", "--steps", "1",
                     "--out", str(out)]) == 0
    for extra, used in (([], 24), (["--mem-len", "8"], 8)):
        capsys.readouterr()
        assert cli.main(["eval", str(out), "--json", "--max-tokens", "128", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["mem_len"] == used


def test_a_reused_out_after_an_aborted_run_drops_the_old_tensorboard_events(tmp_path):
    out = tmp_path / "r"
    (out / "tb").mkdir(parents=True)
    old = out / "tb" / "events.out.tfevents.1.old.0"
    old.write_bytes(b"old curve")
    assert cli.main(["train", *LM, "train.tensorboard=true", "--steps", "1", "--out", str(out)]) == 0
    events = list((out / "tb").glob("events.out.tfevents.*"))
    assert not old.exists() and len(events) == 1, events


# -- messages that point the right way ------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """A small GPT-2 directory as transformers writes it, without a tokenizer.json."""
    import torch

    from tfamily import members
    from tfamily.build import build
    from tfamily.export.hf import export_hf
    torch.manual_seed(0)
    spec = members.get("gpt")().override({"d_model": 16, "heads.n_heads": 2, "depth.n_layers": 1, "vocab_size": 40,
                                          "position.max_len": 32})
    out = tmp_path_factory.mktemp("hf") / "gpt2"
    export_hf(build(spec), out)
    return out


def test_generate_on_a_conversion_without_a_tokenizer_names_the_missing_file(hf_dir, tmp_path, capsys):
    assert cli.main(["convert", str(hf_dir), "--out", str(tmp_path / "conv")]) == 0
    err = _refused(capsys, ["generate", str(tmp_path / "conv"), "--tokens", "4"],
                   [str(hf_dir.resolve()), "no tokenizer.json", "copy the model's tokenizer.json",
                    f"tfamily convert {hf_dir.resolve()} --out"])
    assert "synthetic task" not in err


def test_convert_refuses_a_missing_corpus_file_now_not_at_eval(hf_dir, tmp_path, capsys):
    _refused(capsys, ["convert", str(hf_dir), "--out", str(tmp_path / "conv"), "--corpus", "missing.txt"],
             ["--corpus missing.txt", "no such file", "tinyshakespeare", "existing text file"])
    assert not (tmp_path / "conv").exists()


def test_resume_with_init_from_is_refused_not_ignored(run, capsys):
    # the run went on from its own weights, or said "resume without model overrides" with none given
    err = _refused(capsys, ["train", "--resume", str(run), "--init-from", str(run), "--steps", "4"],
                   ["--resume continues the run from its own weights", f"--init-from {run}",
                    "drop --init-from", "--out NEW_DIR"])
    assert "without model overrides" not in err


def test_resume_with_other_lora_settings_is_refused_before_torch_size_mismatch(run, capsys):
    err = _refused(capsys, ["train", "--resume", str(run), "train.lora.rank=4", "--steps", "4"],
                   ["LoRA settings (none)", "train.lora.rank=4", "drop train.lora.rank", "--init-from RUN"])
    assert "size mismatch" not in err


@pytest.mark.parametrize("env, words", [
    ("LunarLander-v3", ["'LunarLander-v3'", "Box2D", 'pip install swig "gymnasium[box2d]"']),
    ("phys2d/CartPole-v1", ["'phys2d/CartPole-v1'", "jax", 'pip install "gymnasium[jax]"']),
    ("Hopper-v3", ["'Hopper-v3'", "mujoco-py", "Hopper-v5", 'pip install "gymnasium[mujoco]"']),
])
def test_an_environment_whose_dependency_is_missing_is_one_line_with_the_pip_command(env, words, tmp_path, capsys,
                                                                                    monkeypatch):
    import sys
    needs = {"LunarLander-v3": "Box2D", "phys2d/CartPole-v1": "jax", "Hopper-v3": "mujoco_py"}[env]
    monkeypatch.setitem(sys.modules, needs, None)  # missing here even where it is installed: its import fails
    _refused(capsys, ["rl", "train", "--env", env, "--steps", "4096", "--out", str(tmp_path / "r")], words)


@pytest.mark.parametrize("argv", [["bench", "nosuch", "--help"], ["rl", "nosuch"], ["repro", "nosuch", "-h"]])
def test_an_unknown_command_of_a_group_exits_2_naming_it(argv, capsys):
    _refused(capsys, argv, [f"unknown command {argv[1]!r}", "choose from", f"tfamily {argv[0]} --help"])


def test_a_second_ctrl_c_exit_names_the_resume_command_too(run, monkeypatch, capsys):
    from tfamily.base import interrupt
    from tfamily.train import checkpoint

    def exit_(code):
        raise SystemExit(code)
    monkeypatch.setattr(interrupt.os, "_exit", exit_)
    capsys.readouterr()
    with checkpoint.resumable(lambda: run, "tfamily train --resume"):
        with pytest.raises(SystemExit):
            interrupt._exit_now()
    err = capsys.readouterr().err
    assert "exiting" in err and "step 2" in err and f"`tfamily train --resume {run}`" in err, err
