"""`tfamily rl train | eval | compare` end to end on a tiny run, and their bad-input messages."""
from __future__ import annotations

import json

import pytest

from tfamily.cli import main
from tfamily.rl.toy import ID

TINY = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
        "--d-model", "8", "--layers", "1", "--set", "eval_episodes=4", "--no-progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "run"
    assert main(["rl", "train", *TINY, "--steps", "32", "--out", str(out), "--json"]) == 0
    return out


def test_train_writes_a_run(run, capsys):
    rows = (run / "train.csv").read_text().splitlines()
    assert rows[0].split(",")[-2:] == ["mean_return", "episodes"]
    assert len(rows) == 1 + 2 * 2  # two rollouts of two minibatch updates, one row each
    result = json.loads((run / "result.json").read_text())
    assert result["tokens"] == 32 and result["unit"] == "env_steps" and result["val_episodes"] == 4
    assert -1.0 <= result["val_return"] <= 1.0


def test_eval_json(run, capsys):
    assert main(["rl", "eval", str(run), "--episodes", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 6 and out["env"] == ID and out["member"] == "lstm" and out["env_steps"] == 32
    assert -1.0 <= out["mean_return"] <= 1.0 and out["mean_length"] == 2.0  # two-step episodes


def test_compare_plots(run, tmp_path, capsys):
    png = tmp_path / "curves.png"
    assert main(["rl", "compare", str(run), str(run), "--out", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert png.stat().st_size > 1000 and len(out["runs"]) == 2 and out["runs"][0]["env_steps"] == 32


@pytest.mark.parametrize("argv, message", [
    (["rl", "train", "--steps", "100"], "needs --env ENV and --steps N"),
    (["rl", "train", "--env", "popgym-RepeatFirstEsy-v0", "--steps", "100000"], "close matches: popgym-RepeatFirstEasy-v0"),
    (["rl", "train", "--env", "MountainCarContinuous-v0", "--steps", "100000"], "continuous action space"),
    (["rl", "train", "--env", ID, "--steps", "100"], "use --steps >= 2048"),
    (["rl", "train", "--env", ID, "--member", "gpt", "--steps", "4096"], "no memory across steps"),
    (["rl", "eval", "/nonexistent/run", "--episodes", "3"], "nonexistent"),
    (["rl", "compare", "/nonexistent/run"], "does not exist"),
])
def test_bad_input_is_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, *(["--out", str(tmp_path / "x")] if argv[1] == "train" else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
