"""`tfamily plot alignment RUN`: a trained recurrent encoder-decoder's attention weights,
target x source, as a PNG and JSON (rows are distributions over the source)."""
from __future__ import annotations

import json
import re

import pytest

from tfamily.cli import main
from tfamily.train.config import load
from tfamily.train.loop import Trainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("align") / "run"
    cfg = load(None, ["member=bahdanau_attention", "model.d_model=16", "model.dropout=0.0", "data.corpus=null",
                      "data.task=reverse", "data.task_params={n_symbols: 6, min_len: 3, max_len: 6}",
                      "train.batch_size=8", "train.max_steps=3", "train.eval_every=null", "train.eval_tokens=64",
                      "train.threads=1", "train.precision=fp32", "train.progress=false", "train.tensorboard=false",
                      f"train.out={out}"])
    trainer = Trainer(cfg)
    trainer.fit()
    trainer.close()
    return out


def test_plot_writes_the_weights_target_by_source(run, tmp_path, capsys):
    png = tmp_path / "a.png"
    assert main(["plot", "alignment", str(run), "--ids", "1 2 3 4", "--max-len", "5", "--out", str(png), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert png.stat().st_size > 1000 and json.loads(png.with_suffix(".json").read_text()) == result
    assert result["source"] == ["1", "2", "3", "4"] and 1 <= len(result["target"]) <= 5
    assert len(result["weights"]) == len(result["target"])
    for row in result["weights"]:
        assert len(row) == 4 and abs(sum(row) - 1.0) < 1e-4
    # A teacher-forced target of one's choosing.
    assert main(["plot", "alignment", str(run), "--ids", "1 2 3", "--target-ids", "3 2 1", "--out", str(png),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["target"] == ["3", "2", "1"] and len(result["weights"]) == 3


@pytest.mark.parametrize("args, match", [
    (["--text", "abc"], "synthetic task, which has no text vocabulary"),
    (["--ids", "1 x"], "space-separated integers"),
    (["--ids", "1 99"], "token ids in 0.."),
    ([], "exactly one of --text"),
])
def test_bad_input_is_refused_naming_the_fix(run, tmp_path, args, match, capsys):
    assert main(["plot", "alignment", str(run), *args, "--out", str(tmp_path / "x.png")]) != 0
    assert re.search(match, capsys.readouterr().err)
