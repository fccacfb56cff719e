"""`tfamily bench sdpa-tiles`: rows, files, pair counts and bad tile specs (no timing assertions)."""
from __future__ import annotations

import json

import pytest

from tfamily import cli
from tfamily.bench.sdpa_tiles import parse_tile


def test_rows_count_pairs_and_write_files(tmp_path, capsys):
    out = tmp_path / "tiles"
    argv = ["bench", "sdpa-tiles", "--seq-len", "64", "--heads", "2", "--d-head", "8", "--tiles", "16x2",
            "--repeats", "1", "--out", str(out), "--json"]
    assert cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["masked"]) for r in rows] == [("dense_causal", False), ("tiles", False), ("tiles", True)]
    assert rows[0]["pairs"] == 2 * 64 * 65 // 2 and rows[0]["tile_cost"] == 1.0
    assert all(r["pairs"] == 2 * 4 * 16 * 32 for r in rows[1:])
    dense_rate = rows[0]["gpairs_per_s"]
    assert all(r["tile_cost"] == pytest.approx(dense_rate / r["gpairs_per_s"]) for r in rows)
    assert json.loads((out / "sdpa_tiles.json").read_text()) == rows
    assert len((out / "sdpa_tiles.csv").read_text().splitlines()) == 4


def test_bad_tile_specs_name_the_value(capsys):
    assert parse_tile("128x3") == (128, 3)
    with pytest.raises(ValueError, match="'12-3' is not BxK"):
        parse_tile("12-3")
    with pytest.raises(ValueError, match="'0x3' needs B >= 1"):
        parse_tile("0x3")
    assert cli.main(["bench", "sdpa-tiles", "--seq-len", "64", "--tiles", "48x2", "--out", "/tmp/x"]) != 0
    assert "--seq-len 64 is not a multiple of the tile rows 48" in capsys.readouterr().err
