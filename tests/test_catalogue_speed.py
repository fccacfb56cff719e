"""The bad-input catalogue, speed settings: train.threads and train.precision (machine, auto or a
value), `eval`/`generate --threads N` and `tfamily calibrate`. Each row: one line naming the value
and the fix, exit status 2, before a checkpoint is read or anything is timed."""
from __future__ import annotations


import pytest
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

ROWS = [
    R("train train.threads=fast", ["train.threads", "'fast'", "'auto' or 'machine'"]),
    R("train train.threads=0", ["train.threads", ">= 1", "got 0"]),
    R("train train.precision=fastest", ["train.precision='fastest'", "valid: auto, bf16, fp16, fp32, machine"]),
    R("train --precision fastest", ["--precision", "'fastest'", "machine"]),
    R("eval {missing} --threads 0", ["--threads", ">= 1", "got 0"]),
    R("generate {missing} --threads -2", ["--threads", ">= 1", "got -2"]),
    R("calibrate --width 0", ["--width", ">= 1", "got 0", "--width 256"]),
    R("calibrate --width wide", ["--width", "'wide'"]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_speed_settings_refuse_bad_input_in_one_line(row, tmp_path, capsys):
    argv = [a.replace("{missing}", str(tmp_path / "no-run")) for a in row.argv]
    if argv[0] == "train":
        argv += ["--out", str(tmp_path / "out")]
    last = run_row(row, argv, capsys)
    for w in row.words:
        assert w in last, (w, last)
    assert not (tmp_path / "out" / "checkpoints").exists()
