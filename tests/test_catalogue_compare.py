"""The bad-input catalogue for `compare` and the plots: an --out that names no figure file, and runs
with nothing to draw. Each row: one line naming the value and the fix, exit status 2, no figure."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

def _run(root: Path, result: dict, train: list[dict], evals: list[dict], config: dict) -> None:
    """A finished run directory as the training loop writes it (result.json, config, the two logs)."""
    root.mkdir()
    (root / "result.json").write_text(json.dumps(result))
    (root / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    for name, rows in (("train.csv", train), ("eval.csv", evals)):
        with open(root / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)) or ["step"])
            w.writeheader()
            w.writerows(rows)


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> str:
    """A text run, an RL run, a synthetic-task run and a run whose logs are empty."""
    d = tmp_path_factory.mktemp("compare")
    text = {"member": "gpt", "data": {"corpus": "tinyshakespeare"}}
    _run(d / "lm", {"member": "gpt", "steps": 2, "val_loss": 2.0}, [{"step": 2, "loss": 2.1, "elapsed_s": 0.1}],
         [{"step": 2, "loss": 2.0, "bpc": 2.9}], text)
    _run(d / "rl", {"member": "lstm", "steps": 2, "unit": "env_steps", "val_loss": 0.2},
         [{"step": 1, "tokens": 16, "loss": 0.2, "elapsed_s": 0.1, "mean_return": 0.5}], [],
         {"member": "lstm", "data": {"task": "tfamily/RememberFirst-v0"}})
    _run(d / "copy", {"member": "gpt", "steps": 2, "val_loss": 1.0}, [{"step": 2, "loss": 1.1, "elapsed_s": 0.1}],
         [{"step": 2, "loss": 1.0}], {"member": "gpt", "data": {"task": "copy", "corpus": None}})
    _run(d / "empty", {"member": "gpt", "steps": 1, "val_loss": 3.0}, [], [], text)
    (d / "figs").mkdir()
    return str(d)


ROWS = [
    R("compare {d}/lm --out {d}/fig", ["--out {d}/fig has no suffix", "{d}/fig.png"]),
    R("compare {d}/lm --out {d}/fig.txt", ["--out {d}/fig.txt", ".txt", "not an image format", "png"]),
    R("compare {d}/lm --out {d}/figs", ["--out {d}/figs is a directory", "{d}/figs/curves.png"]),
    R("compare {d}/lm --out {d}/figs/", ["is a directory", "curves.png"]),
    R("compare {d}/rl --bpc --out {d}/p.png", ["--bpc", "{d}/rl is an RL run", "drop --bpc"]),
    R("rl compare {d}/rl --bpc --out {d}/p.png", ["--bpc", "{d}/rl is an RL run"]),
    R("plot curves {d}/lm --out {d}/fig", ["--out {d}/fig has no suffix", "{d}/fig.png"]),
    R("plot curves {d}/lm --out {d}/figs", ["--out {d}/figs is a directory", "curves.png"]),
    R("plot curves {d}/lm --out {d}/fig.docx", [".docx", "not an image format"]),
    R("plot curves {d}/empty --out {d}/p.png", ["{d}/empty has nothing to draw", "no rows", "train.log_every=1"]),
    R("plot curves {d}/lm {d}/empty --out {d}/p.png", ["{d}/empty has nothing to draw"]),
    R("plot curves {d}/rl --bpc --out {d}/p.png", ["--bpc", "{d}/rl is an RL run", "drop --bpc"]),
    R("plot curves {d}/copy --bpc --out {d}/p.png", ["--bpc", "{d}/copy has no evaluation with bits per character",
                                                     "drop --bpc"]),
    R("plot ponder {d}/lm --text hi --out {d}/figs", ["--out {d}/figs is a directory", "curves.png"]),
    R("plot ponder {d}/lm --text hi --out {d}/ponder", ["--out {d}/ponder has no suffix", "{d}/ponder.png"]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_compare_and_plots_refuse_bad_input_in_one_line(row, d, capsys):
    argv = [a.replace("{d}", d) for a in row.argv]
    last = run_row(row, argv, capsys)
    for w in row.words:
        w = w.replace("{d}", d)
        assert w in last, (w, last)
    assert not (Path(d) / "p.png").exists() and not (Path(d) / "fig").exists()
