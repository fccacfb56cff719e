"""Benchmark rows on disk: ``STEM.json`` (the list as printed by ``--json``) and ``STEM.csv``
(the named fields, empty where a row lacks one), each written to a temporary file and renamed
so an interrupted run never leaves a half-written table."""
from __future__ import annotations

import json
from pathlib import Path

from ..base.files import write_atomic


def write_rows(out: str | Path, stem: str, rows: list[dict], fields: list[str]) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / f"{stem}.json", json.dumps(rows, indent=2))
    lines = [",".join(fields)] + [",".join("" if r.get(k) is None else str(r[k]) for k in fields) for r in rows]
    write_atomic(out / f"{stem}.csv", "\n".join(lines) + "\n")
    return out


def print_rows(rows: list[dict], columns: list[tuple[str, str, str]], as_json: bool) -> None:
    """Print ``rows`` as the JSON list (``--json``) or as an aligned table of ``columns``:
    (key, header, format spec with width, e.g. ``'>9.3f'``; a ``<`` spec left-aligns)."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    def width(spec: str) -> int:
        digits = "".join(c for c in spec.split(".")[0] if c.isdigit())
        return int(digits) if digits else 0
    print(" ".join(f"{h:<{width(f)}}" if f.startswith("<") else f"{h:>{width(f)}}" for _, h, f in columns))
    for r in rows:
        print(" ".join(format(r[k], f) for k, _, f in columns))


def check_model_args(args, names: tuple) -> None:
    """Refuse bench sizes below 1 and (when ``heads`` is among them) a width its heads do not
    divide, naming the flag."""
    for name in names:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if "heads" in names and args.d_model % args.heads:
        raise ValueError(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
