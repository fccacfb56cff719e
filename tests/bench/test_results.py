"""bench/results.py: the JSON and CSV tables every benchmark writes."""
from __future__ import annotations

import csv
import json

from tfamily.bench.results import write_rows


def test_rows_round_trip_and_no_temporary_files_remain(tmp_path):
    rows = [{"a": 1, "b": None, "c": "x"}, {"a": 2.5, "c": "y", "extra": 3}]
    out = write_rows(tmp_path / "new" / "dir", "t", rows, ["a", "b", "c"])
    assert json.loads((out / "t.json").read_text()) == rows
    with open(out / "t.csv") as f:
        assert list(csv.DictReader(f)) == [{"a": "1", "b": "", "c": "x"}, {"a": "2.5", "b": "", "c": "y"}]
    assert sorted(p.name for p in out.iterdir()) == ["t.csv", "t.json"]
