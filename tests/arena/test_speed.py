"""`tfamily arena speed`: every member timed alternating in one process at its cells' shape, the
leaderboard's speed and memory columns taken from it, labelled with the machine."""
from __future__ import annotations

import json

import pytest

from tfamily import cli
from tfamily.arena import speed, table

TINY = ["arena", "--members", "gpt", "longformer", "--tasks", "listops", "--length", "listops=16", "--steps", "2",
        "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "4", "--eval-examples", "8"]


class Clock:
    """A meter that records which member each timed call ran (no real time is read)."""

    def __init__(self):
        self.calls = []

    def seconds(self, fn):
        return fn(), float(len(self.calls))


def test_members_take_turns_in_rotated_order_after_one_warm_up_each():
    ran, clock = [], Clock()

    def run(name):
        ran.append(name)
        clock.calls.append(name)
    seconds = speed.alternate({m: (m,) for m in "abc"}, 3, clock, run=run)
    assert ran == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {m: len(s) for m, s in seconds.items()} == {"a": 3, "b": 3, "c": 3}


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed") / "a"
    assert cli.main([*TINY, "--speed-rounds", "0", "--out", str(out)]) == 0
    assert not (out / "speed.json").exists()  # --speed-rounds 0: the columns stay the cells' own
    return out


def test_speed_command_measures_every_member_and_the_leaderboard_uses_it(arena, capsys):
    before = json.loads((arena / "leaderboard.json").read_text())
    assert {r["speed_from"] for r in before} == {"cells"}
    assert cli.main(["arena", "speed", str(arena), "--rounds", "2"]) == 0
    rows = json.loads((arena / "speed.json").read_text())
    assert [(r["task"], r["member"], r["rounds"], r["tokens_per_step"]) for r in rows] == [
        ("listops", "gpt", 2, 4 * 16), ("listops", "longformer", 2, 4 * 16)]
    assert all(r["tokens_per_s"] > 0 and r["peak_mb"] >= 0 and r["machine"] and "," not in r["machine"]
               and r["step_ms_min"] <= r["step_ms"] <= r["step_ms_max"] for r in rows)
    board = json.loads((arena / "leaderboard.json").read_text())
    assert {r["member"]: (r["tokens_per_s"], r["peak_mb"], r["speed_from"]) for r in board} == {
        r["member"]: (r["tokens_per_s"], r["peak_mb"], "alternating") for r in rows}  # the board is best first
    assert rows[0]["machine"] in (arena / "leaderboard.md").read_text()
    # accuracy is untouched: the same cells, only the speed columns change
    assert [r["test_acc"] for r in board] == [r["test_acc"] for r in before]
    # a merge of the directory keeps the measured columns
    merged = arena.parent / "merged"
    assert cli.main(["arena", "merge", str(arena), "--out", str(merged)]) == 0
    assert {r["speed_from"] for r in json.loads((merged / "leaderboard.json").read_text())} == {"alternating"}
    assert table.load_speed([arena]) == rows


def test_speed_of_a_directory_without_cells_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["arena", "speed", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no finished arena cells" in err and "tfamily arena --out" in err
