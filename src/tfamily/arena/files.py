"""The arena's own files read back: a cell's ``plan.json`` and ``cell.json`` and a directory's
``speed.json``, through the bounded loader (``base/textload.py``), the fields a later step reads checked
on the way in. A corrupt or hand-edited file is then one line naming it and the field, never a
KeyError or a TypeError inside the leaderboard's arithmetic."""
from __future__ import annotations

from pathlib import Path

from ..base.textload import expect, read_json, require

NUMBER = (int, float, type(None))
FIX = "the file is corrupt or hand-edited: delete the cell's directory to rerun it"
# cell.json: the fields that key a row, then every number the leaderboard averages or prints.
CELL_KEYS = {"task": str, "member": str, "seed": int}
CELL_NUMBERS = ("lr", "length", "params", "params_off", "d_ff", "steps", "test_acc", "val_acc", "test_bpc", "val_bpc",
                "val_loss", "train_loss", "train_s", "flops_per_step", "train_flops", "tokens_per_s", "peak_mb",
                "majority_acc")
PLAN_KEYS = {"task": str, "member": str, "length": int, "batch_size": int, "device": str, "precision": str}
SPEED_KEYS = {"task": str, "member": str, "tokens_per_s": (int, float), "peak_mb": NUMBER}


def _check(d: dict, keys: dict, where: str) -> dict:
    for key, kind in keys.items():
        require(d, key, kind, where, fix=FIX)
    return d


def read_cell(path: str | Path) -> dict:
    """A finished cell's ``cell.json`` (its leaderboard row)."""
    row = _check(read_json(path), CELL_KEYS, str(path))
    for key in CELL_NUMBERS:
        require(row, key, NUMBER, str(path), None, fix=FIX)
    require(row, "metric", str, str(path), "acc", fix=FIX)
    return row


def read_plan(path: str | Path) -> dict:
    """A cell's ``plan.json`` (what the arena asked of it), with what ``tfamily arena speed`` reads."""
    return _check(read_json(path), PLAN_KEYS, str(path))


def read_speed(path: str | Path) -> list[dict]:
    """The rows of a directory's ``speed.json``."""
    rows = read_json(path, list)
    return [_check(expect(r, dict, f"{path} row {i}", FIX), SPEED_KEYS, f"{path} row {i}") for i, r in enumerate(rows)]
