"""MMER (Morad et al. 2023: per trial the max over training of the batch-mean episodic return;
mean and std over trials) from hand-made curves, the table's rows and files, the curves' PNGs
and published-baseline rows."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tfamily.rl.table import curve, load_baselines, markdown, mmer, reached, runs, table, write
from tfamily.rl.toy import ID


def test_mmer_is_the_max_of_batch_means():
    assert mmer([-0.5, None, 0.25, 0.1, math.nan, -1.0]) == 0.25
    assert mmer([-0.9]) == -0.9
    with pytest.raises(ValueError, match="no episode ended"):
        mmer([None, math.nan])


def _fake_run(root: Path, env: str, label: str, seed: int, updates: list[tuple[int, float | None]],
              val: float | None = 0.0, steps: int = 64, finished: bool = True) -> Path:
    """A run directory as the sweep leaves it: plan.json, train.csv (one row per PPO update,
    two per rollout), result.json when finished."""
    run = root / env.replace("/", "_") / f"{label}-s{seed}"
    run.mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"env": env, "label": label, "seed": seed, "steps": steps}))
    lines = ["step,tokens,loss,mean_return,episodes"]
    for i, (tokens, ret) in enumerate(updates):
        lines += [f"{2 * i + k + 1},{tokens},0.1,{'' if ret is None else ret},{i}" for k in range(2)]
    (run / "train.csv").write_text("\n".join(lines) + "\n")
    if finished:
        (run / "result.json").write_text(json.dumps({"tokens": updates[-1][0], "tokens_per_s": 100.0 * (seed + 1),
                                                     "stopped": "max_steps", "val_return": val}))
    return run


def test_curve_is_one_point_per_rollout(tmp_path):
    run = _fake_run(tmp_path, ID, "lstm", 0, [(16, None), (32, -0.5), (48, 0.5), (64, 0.25)])
    assert curve(run) == ([32, 48, 64], [-0.5, 0.5, 0.25])


def test_table_mean_and_std_over_trials(tmp_path):
    a = [(16, -0.5), (32, 0.5), (48, 0.25), (64, 0.0)]       # MMER 0.5, final 0.0
    b = [(16, -1.0), (32, -0.25), (48, 0.75), (64, 0.75)]    # MMER 0.75, final 0.75
    _fake_run(tmp_path, ID, "gtrxl", 0, a, val=0.5)
    _fake_run(tmp_path, ID, "gtrxl", 1, b, val=1.0)
    _fake_run(tmp_path, ID, "gtrxl", 2, [(16, 0.9)], finished=False)   # pending: not a trial
    _fake_run(tmp_path, ID, "lstm", 0, [(16, -0.5), (32, -0.25), (48, -0.5), (64, -0.75)], val=-0.5)
    rows = runs(tmp_path)
    assert sorted((r["label"], r["seed"], r["finished"]) for r in rows) == \
        [("gtrxl", 0, True), ("gtrxl", 1, True), ("gtrxl", 2, False), ("lstm", 0, True)]
    entries = {e["label"]: e for e in table(rows)}
    g, s = entries["gtrxl"], entries["lstm"]
    assert (g["trials"], g["seeds"], g["env_steps"]) == (2, [0, 1], 64)
    assert g["mmer_mean"] == 0.625 and g["mmer_std"] == pytest.approx(statistics.stdev([0.5, 0.75]))
    assert g["final_mean"] == 0.375 and g["eval_mean"] == 0.75 and g["env_steps_per_s"] == 150.0
    assert (s["trials"], s["mmer_mean"], s["final_mean"]) == (1, -0.25, -0.75) and math.isnan(s["mmer_std"])
    text = markdown(list(entries.values()), load_baselines(None), [r for r in rows if not r["finished"]])
    assert f"| {ID} | gtrxl | 2 | 64 | 0.625 ± 0.177 | 0.375 ± 0.530 | 0.750 ± 0.354 | 150 |" in text
    assert f"| {ID} | lstm | 1 | 64 | -0.250 | -0.750 | -0.500 | 100 |" in text
    assert "not included (no source" in text and "gtrxl-s2" in text.split("Pending")[1]
    # the speed column: gtrxl reaches 0.5 at 32 (seed 0) and 48 (seed 1) env steps, lstm never
    fast = {e["label"]: e for e in table(rows, reach=0.5)}
    assert (fast["gtrxl"]["reached"], fast["gtrxl"]["reach_steps_mean"]) == (2, 40)
    assert fast["lstm"]["reached"] == 0 and math.isnan(fast["lstm"]["reach_steps_mean"])
    text = markdown(list(fast.values()), load_baselines(None), [])
    assert "steps to return >= 0.5 |" in text and "| 40 (2/2 trials) |" in text and "| not reached |" in text


def test_reached():
    assert reached([16, 32, 48], [-0.5, 0.5, 0.25], 0.25) == 32
    assert reached([16, 32, 48], [-0.5, 0.5, 0.25], 0.6) is None


def test_write_table_files_plots_and_baselines(tmp_path):
    for seed in range(3):
        _fake_run(tmp_path, ID, "gtrxl", seed, [(16, -0.5), (32, 0.1 * seed), (48, 0.2 * seed)], steps=48)
        _fake_run(tmp_path, ID, "gru", seed, [(16, -0.5), (32, -0.4)], steps=32)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"source": "hand-made for the test", "rows": [
        {"env": ID, "model": "GRU", "mmer_mean": 0.9, "mmer_std": 0.05, "ref": "Table X"}]}))
    report = write(tmp_path, tmp_path / "out", base)
    out = tmp_path / "out"
    assert f"| {ID} | POPGym GRU (Table X) | | | 0.900 ± 0.050 | | | |" in (out / "table.md").read_text()
    csv_rows = (out / "table.csv").read_text().splitlines()
    assert len(csv_rows) == 3 and csv_rows[0].startswith("env,label,trials,seeds,env_steps,mmer_mean")
    saved = json.loads((out / "table.json").read_text())
    assert {e["label"]: e["mmer_mean"] for e in saved["entries"]} == pytest.approx({"gtrxl": 0.2, "gru": -0.4})
    png = Path(report["plots"][ID])
    assert png == out / "curves" / f"{ID.replace('/', '_')}.png" and png.stat().st_size > 1000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": [{"env": ID, "model": "GRU"}]}))
    with pytest.raises(ValueError, match="each row needs"):
        load_baselines(bad)
