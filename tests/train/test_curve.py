"""train.eval_every: auto: about 20 evaluations a run, whatever its budget (steps or time), the ones
before the last on fewer tokens and together a small share of the training time; the final one on
train.eval_tokens, its time kept back from a time budget at the rate the run's evaluations measured."""
from __future__ import annotations

import json

import pytest

from tfamily import compare
from tfamily.cli import main
from tfamily.train import distributed, loop
from tfamily.train.budget import CURVE_POINTS, CURVE_SHARE, MARGIN, Budget, Curve
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

ONE = distributed.Dist()
LM = ["--member", "gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=32", "data.seq_len=32", "train.batch_size=8", "train.threads=1",
      "train.eval_tokens=4096", "train.progress=false", "train.tensorboard=false", "train.ckpt_every=null",
      "--precision", "fp32"]


def _due(curve: Curve, steps: range, total: int) -> list[int]:
    return [s for s in steps if curve.due(s, total)]


def test_auto_evaluates_every_twentieth_of_the_steps_at_logged_steps():
    at = _due(Curve("auto", 10, 4096, 256), range(1, 1001), 1000)
    assert at == list(range(50, 1000, 50)) and len(at) == CURVE_POINTS - 1  # the final one is the 20th
    assert _due(Curve("auto", 10, 4096, 256), range(1, 31), 30) == [10, 20]  # no more often than logged
    assert _due(Curve("auto", 1, 4096, 256), range(1, 5), 4) == [1, 2, 3]
    assert _due(Curve("auto", 10, 4096, 256), range(501, 1001), 1000) == list(range(550, 1000, 50))  # resumed
    assert _due(Curve(7, 10, 4096, 256), range(1, 30), 1000) == [7, 14, 21, 28]
    assert _due(Curve(None, 10, 4096, 256), range(1, 30), 20) == []


def test_time_budget_points_follow_the_refit_horizon():
    curve = Curve("auto", 1, 4096, 256)
    assert not curve.due(1, 10**6)  # before the first refit: the schedule's placeholder end
    assert _due(curve, range(2, 200), 200) == list(range(10, 200, 10))
    assert not curve.due(200, 200)  # the end is the final evaluation's


def test_intermediate_evaluations_share_a_tenth_of_the_training_time():
    budget, curve = Budget(60.0, None, 100_000), Curve("auto", 10, 100_000, 256)
    # 2000 steps of 30 ms: 60 s; at an estimated 2.5 x 10k units/s the share buys 0.3 s * 25k units
    units = curve.eval_units(budget, 2000, 0.03, 10_000.0, ONE)
    assert units == pytest.approx(CURVE_SHARE * 60.0 / (CURVE_POINTS - 1) * 25_000, abs=1)
    budget.measured(2_000, 1.0)  # slower than estimated: the next evaluations score less, never more
    slower = CURVE_SHARE * 60 / (CURVE_POINTS - 1) * 2_000 / MARGIN
    assert curve.eval_units(budget, 2000, 0.03, 10_000.0, ONE) == pytest.approx(slower, abs=1)
    budget.measured(50_000, 1.0)
    assert curve.eval_units(budget, 2000, 0.03, 10_000.0, ONE) == pytest.approx(slower, abs=1)
    assert curve.eval_units(budget, 1, 1e-6, 10.0, ONE) == 256  # at least one batch
    assert Curve(500, 10, 100_000, 256).eval_units(budget, 2000, 0.03, 10_000.0, ONE) is None  # eval_tokens


def test_the_final_evaluation_is_predicted_from_the_measured_rate():
    budget = Budget(60.0, None, 100_000)
    assert budget.final_eval_s(10_000.0) == pytest.approx(100_000 / 25_000)  # before any evaluation
    budget.measured(5_000, 1.0)
    assert budget.final_eval_s(10_000.0) == pytest.approx(MARGIN * 20.0)
    assert budget.left(30.0, 10_000.0) == pytest.approx(30.0 - MARGIN * 20.0)


def test_auto_is_the_default_and_other_words_are_refused():
    assert load(None, {}).train.eval_every == "auto"
    with pytest.raises(TypeError, match=r"train.eval_every must be an integer >= 1 or null, got 'often'.*'auto'"):
        load(None, {"train.eval_every": "often"})


def test_evaluating_along_the_way_never_changes_what_the_run_trains(tmp_path, capsys):
    """Reformer's LSH draws rotations from torch's generator in evaluation too."""
    runs = []
    for every in ("auto", "null"):
        out = tmp_path / every
        assert main(["train", *LM, "--member", "reformer", "model.dropout=0.0", "train.log_every=1",
                     f"train.eval_every={every}", "--steps", "4", "--out", str(out)]) == 0
        runs.append(out)
    capsys.readouterr()
    curves = [[(r["step"], r["loss"]) for r in read_csv(run / "train.csv")] for run in runs]
    assert curves[0] == curves[1]
    assert [int(r["step"]) for r in read_csv(runs[0] / "eval.csv")] == [1, 2, 3, 4]
    assert [int(r["step"]) for r in read_csv(runs[1] / "eval.csv")] == [4]


def test_a_short_timed_run_draws_a_curve_and_keeps_to_its_budget(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *LM, "train.log_every=5", "train.max_steps=null", "--time", "3s", "--out", str(out)]) == 0
    capsys.readouterr()
    r = json.loads((out / "result.json").read_text())
    assert r["stopped"] == "time_budget" and CURVE_POINTS - 5 <= len(r["curve"]) <= CURVE_POINTS + 1
    *before, final = r["curve"]
    assert final["scored"] == 4096 and all(c["scored"] < 4096 for c in before)
    assert r["eval_s"] <= 2 * CURVE_SHARE * r["train_s"]  # ~10%; slack for a loaded machine
    assert r["elapsed_s"] <= 3.0 * 1.25  # the final evaluation inside the budget (5% measured in the slow test)
    (_, steps, _, bpc) = compare.lines(compare.load(out), bpc=True)[0]
    assert len(steps) == len(r["curve"]) and bpc[-1] == pytest.approx(r["val_bpc"])
    assert main(["plot", "curves", str(out), "--bpc", "--out", str(tmp_path / "bpc.png")]) == 0


@pytest.mark.slow
def test_a_minute_run_overshoots_its_budget_by_at_most_5_percent(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *LM, "train.eval_tokens=100000", "train.max_steps=null", "--time", "60s",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    r = json.loads((out / "result.json").read_text())
    assert CURVE_POINTS - 3 <= len(r["curve"]) <= CURVE_POINTS + 1
    assert r["eval_s"] <= 1.5 * CURVE_SHARE * r["train_s"]
    assert r["elapsed_s"] <= 60 * 1.05 and r["wall_s"] <= 60 * 1.05
