"""The sources of `tfamily data prepare` (data/readers.py): files, folders and globs, plain text in
pieces cut after newlines, JSONL / CSV / Parquet rows by column, and what is refused up front."""
from __future__ import annotations

import builtins
import json

import pytest

from tfamily.data import readers


def _docs(src, column="text") -> list:
    """The documents of ``src`` as whole texts (pieces joined)."""
    out = []
    for piece, first, _ in readers.read(src, column):
        text = piece if isinstance(piece, str) else piece.decode("utf-8")
        if first:
            out.append(text)
        else:
            out[-1] += text
    return out


def test_folders_recurse_sorted_without_hidden_files_and_globs_match(tmp_path):
    for name in ("b/2.txt", "a.txt", "b/1.md", ".git/x", "b/.hidden"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    assert [s.path.relative_to(tmp_path).as_posix() for s in readers.expand([str(tmp_path)])] == \
        ["a.txt", "b/1.md", "b/2.txt"]
    assert [s.path.name for s in readers.expand([str(tmp_path / "**" / "*.txt"), str(tmp_path / "a.txt")])] == \
        ["a.txt", "2.txt"]  # sorted matches, a file named twice read once
    with pytest.raises(ValueError, match="matches no file"):
        readers.expand([str(tmp_path / "*.csv")])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        readers.expand([str(tmp_path / "nothing.txt")])


def test_a_long_text_comes_in_pieces_cut_after_newlines_that_rejoin_to_it(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "BLOCK", 64)
    text = "".join(f"line {i} é naïve\n" for i in range(40)) + "no newline at the end ü" * 9
    (tmp_path / "t.txt").write_text(text)
    src = readers.expand([str(tmp_path / "t.txt")])[0]
    pieces = list(readers.read(src, "text"))
    assert len(pieces) > 5 and [f for _, f, _ in pieces] == [True] + [False] * (len(pieces) - 1)
    assert all(p.endswith(b"\n") for p, _, _ in pieces[:5])  # cut after a newline where the block has one,
    assert all(p.decode("utf-8") for p, _, _ in pieces)  # else at a character's start
    assert b"".join(p for p, _, _ in pieces).decode("utf-8") == text
    assert sum(n for _, _, n in pieces) == len(text.encode("utf-8"))
    # a byte range (the position split) starts and ends where asked
    part = b"".join(p for p, _, _ in readers.read(src, "text", 10, 200))
    assert part == text.encode("utf-8")[10:200]


def test_rows_are_documents_by_column_in_every_format(tmp_path):
    rows = [{"text": "first doc\nwith two lines", "n": 1}, {"text": "", "n": 2}, {"text": "third, \"quoted\"", "n": 3}]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    import csv
    with open(tmp_path / "r.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["n", "text"])
        w.writeheader()
        w.writerows(rows)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": [r["text"] for r in rows], "n": [r["n"] for r in rows]}), tmp_path / "r.parquet")
    want = [r["text"] for r in rows]
    for name in ("r.jsonl", "r.csv", "r.parquet"):
        src = readers.expand([str(tmp_path / name)])[0]
        readers.check(src, "text")
        got = _docs(src)
        assert got[:3] == want, name  # JSONL: the blank last line is an empty document too
        with pytest.raises(ValueError, match=r"no column 'body' \(its columns: .*text.*--column"):
            readers.check(src, "body")


def test_binary_files_and_bad_rows_are_refused_by_name(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"abc\0def")
    (tmp_path / "y.txt").write_bytes(b"caf\xe9 latin-1")
    (tmp_path / "z.jsonl").write_text('{"text": "ok"}\n[1, 2]\n')
    (tmp_path / "w.jsonl").write_text('{"text": 3}\n')
    for name, words in (("x.bin", "NUL byte at byte 3"), ("y.txt", "not UTF-8 text (invalid continuation byte at byte 3")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            readers.check(readers.expand([str(tmp_path / name)])[0], "text")
    with pytest.raises(ValueError, match="line 2 is .*not a JSON object"):
        _docs(readers.expand([str(tmp_path / "z.jsonl")])[0])
    with pytest.raises(ValueError, match="column 'text' holds 3, not text"):
        readers.check(readers.expand([str(tmp_path / "w.jsonl")])[0], "text")


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "r.parquet").write_bytes(b"PAR1")
    real = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"needs pyarrow: pip install 'tfamily\[data\]'"):
        readers.check(readers.expand([str(tmp_path / "r.parquet")])[0], "text")
