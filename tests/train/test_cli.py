"""`tfamily train | eval | generate | demo` end to end, and their one-line errors."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from tfamily import cli

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=32", "data.seq_len=32", "train.batch_size=8", "train.eval_tokens=2048",
        "train.progress=false", "train.tensorboard=false", "train.warmup=2", "train.lr=3e-3"]
REQUIRED = {"member", "params", "steps", "tokens", "wall_s", "tokens_per_s", "train_loss", "val_loss", "val_bpc"}


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    assert cli.main(["train", *TINY, "--steps", "12", "--out", str(out), "--json"]) == 0
    return out


def test_train_json_reports_the_required_fields(run_dir):
    result = json.loads((run_dir / "result.json").read_text())
    assert REQUIRED <= set(result)
    assert result["member"] == "gpt" and result["steps"] == 12 and result["tokens"] == 12 * 8 * 32
    assert result["val_bpc"] == pytest.approx(result["val_loss"] / math.log(2))


def test_train_prints_one_json_object_last(tmp_path, capsys):
    assert cli.main(["train", *TINY, "--steps", "2", "--out", str(tmp_path / "r"), "--json",
                     "train.seed=3"]) == 0  # options and key=value in any order
    r = _last_json(capsys.readouterr().out)
    assert REQUIRED <= set(r) and r["steps"] == 2


def test_eval_json_on_the_test_split(run_dir, capsys):
    assert cli.main(["eval", str(run_dir), "--split", "test", "--max-tokens", "1024", "--json"]) == 0
    r = _last_json(capsys.readouterr().out)
    assert {"member", "params", "steps", "tokens", "train_loss", "test_loss", "test_bpc", "test_acc"} <= set(r)
    assert r["split"] == "test" and r["corpus"] == "tinyshakespeare" and r["eval_tokens"] == 1024 and r["steps"] == 12
    assert math.isfinite(r["test_loss"]) and not [k for k in r if k.startswith("val_")]  # named after its split
    # Tiny Shakespeare's convention has no test split: the number is its validation text's, and says so
    assert r["split_note"] == "tinyshakespeare has no test split; this is its validation split"
    assert cli.main(["eval", str(run_dir), "--split", "test", "--max-tokens", "1024"]) == 0
    out = capsys.readouterr().out
    assert "on the test split of tinyshakespeare (tinyshakespeare has no test split" in out
    assert "test_loss" in out and "val_" not in out
    assert cli.main(["eval", str(run_dir), "--max-tokens", "1024", "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["split_note"] is None  # the validation split needs no note


def test_eval_matches_the_trainers_final_evaluation(run_dir, capsys):
    saved = json.loads((run_dir / "result.json").read_text())
    assert cli.main(["eval", str(run_dir), "--max-tokens", "2048", "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["val_loss"] == pytest.approx(saved["val_loss"], rel=1e-6)


@pytest.mark.parametrize("trained_in, other", [("bf16", "fp32"), ("fp32", "bf16"), ("fp16", "fp32")])
def test_eval_uses_the_precision_the_run_trained_in(trained_in, other, tmp_path, capsys):
    # Whatever this CPU's auto would pick, eval reproduces the run's own numbers; asked for the
    # other precision, it gives (slightly) different ones, so the precision really reached the model.
    out = tmp_path / trained_in
    assert cli.main(["train", *TINY, "model.d_model=16", "data.seq_len=16", "train.eval_tokens=256",
                     f"train.precision={trained_in}", "--steps", "2", "--out", str(out), "--json"]) == 0
    trained = _last_json(capsys.readouterr().out)
    assert cli.main(["eval", str(out), "--max-tokens", "256", "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["val_loss"] == pytest.approx(trained["val_loss"], rel=1e-6)
    assert cli.main(["eval", str(out), "--max-tokens", "256", "--precision", other, "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["val_loss"] != trained["val_loss"]


def test_generate_continues_the_prompt(run_dir, capsys):
    assert cli.main(["generate", str(run_dir), "--prompt", "ROMEO:", "--tokens", "80", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ROMEO:") and out.endswith("\n") and len(out) == len("ROMEO:") + 80 + 1
    # Same seed, same text; longer than the 32-token context, so the window slides.
    assert cli.main(["generate", str(run_dir), "--prompt", "ROMEO:", "--tokens", "80", "--seed", "1"]) == 0
    assert capsys.readouterr().out == out


def test_resume_continues_to_more_steps(run_dir, tmp_path, capsys):
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert cli.main(["train", "--resume", str(copy), "--steps", "14", "--json"]) == 0
    r = _last_json(capsys.readouterr().out)
    assert r["steps"] == 14 and r["tokens"] == 14 * 8 * 32 and r["run_dir"] == str(copy)


def test_memory_model_trains_on_streams_and_evaluates_with_a_longer_memory(tmp_path, run_dir, capsys):
    out = tmp_path / "xl"
    argv = ["train", "--member", "transformer_xl", "model.d_model=32", "model.heads.n_heads=2",
            "model.depth.n_layers=2", "model.state.mem_len=16", "model.dropout=0.0", "data.stream=true",
            "data.seq_len=16", "train.batch_size=4", "train.eval_tokens=2048", "train.progress=false",
            "train.tensorboard=false", "--steps", "4", "--out", str(out), "--json"]
    assert cli.main(argv) == 0
    trained = _last_json(capsys.readouterr().out)
    assert cli.main(["eval", str(out), "--max-tokens", "2048", "--json"]) == 0
    same = _last_json(capsys.readouterr().out)
    assert same["val_loss"] == pytest.approx(trained["val_loss"], rel=1e-6)
    assert cli.main(["eval", str(out), "--max-tokens", "2048", "--mem-len", "48", "--json"]) == 0
    longer = _last_json(capsys.readouterr().out)
    assert longer["mem_len"] == 48 and math.isfinite(longer["val_loss"])
    assert longer["val_loss"] != same["val_loss"]  # the memory length reached the model
    assert cli.main(["eval", str(run_dir), "--mem-len", "48"]) == 2
    assert "--mem-len needs a memory model" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["train", "train.precision=fp8"], ["train.precision='fp8'", "auto, bf16, fp16, fp32"]),
    (["train", "model.heads.n_kv=2", "--steps", "1"], ["unknown heads keys", "n_kv_heads"]),
    (["train", "lr=3"], ["must start with one of", "train.lr"]),
    (["train", "-c", "nope"], ["config 'nope' not found", "available configs"]),
    (["train", "--member", "gtp", "--steps", "1"], ["unknown member 'gtp'", "gpt"]),
    (["train", "--time", "soon"], ["train.time_budget='soon'", "5m"]),
    (["train", "--resume", "/nonexistent/run"], ["does not exist"]),
    (["eval", "/nonexistent/run"], ["does not exist"]),
    (["train", "data.corpus=nosuchcorpus", "--steps", "1"], ["unknown corpus", "tinyshakespeare"]),
])
def test_bad_options_are_one_line_exit_2(argv, words, capsys, tmp_path):
    assert cli.main([*argv, "--out", str(tmp_path / "x")] if argv[0] == "train" and "--resume" not in argv
                    else argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_argparse_choices_name_the_valid_values(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--precision", "fp8"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "invalid choice: 'fp8'" in err and "'auto', 'bf16', 'fp16', 'fp32'" in err


def test_data_dir_flag(tmp_path, monkeypatch, capsys):
    shared = os.environ["TFAMILY_DATA"]
    monkeypatch.delenv("TFAMILY_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["train", *TINY, "data.corpus=kjv", "data.vocab=byte", "--steps", "1"]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 2
    assert "kjv.txt" in capsys.readouterr().err
    assert cli.main([*args, "--out", str(tmp_path / "b"), "--data-dir", shared, "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["steps"] == 1


def test_demo_reports_bpc_and_a_sample(tmp_path, capsys):
    argv = ["demo", "--time", "6s", "--out", str(tmp_path / "demo"), "--sample-tokens", "60", "--seed", "3",
            "--device", "cpu", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
            "train.eval_tokens=4096",
            "train.progress=false", "train.tensorboard=false"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "bits/char" in out and "sample (temperature 0.8)" in out and "tfamily generate" in out
    assert (tmp_path / "demo" / "result.json").is_file()
    saved = yaml.safe_load((tmp_path / "demo" / "config.yaml").read_text())["train"]
    assert (saved["seed"], saved["device"]) == (3, "cpu")
