"""The sources of ``tfamily data prepare``: files, folders and globs of plain text (``.gz`` too), and
JSONL, CSV or Parquet files with a text column, read as a stream of documents.

A plain-text file is one document; a JSONL line, a CSV row or a Parquet row is one (its ``column``
field; a row whose field is empty or null is an empty document). ``read(source)`` yields
``(piece, starts_document, bytes_read)``: a long text file comes in pieces of about ``BLOCK`` bytes,
each cut after a newline, so no document is ever held whole. Plain text stays ``bytes`` (UTF-8,
checked: a NUL byte or a byte that is not UTF-8 makes the source "not text"), rows are ``str``.

Libraries: JSON and CSV rows go through the standard library (``json``, ``csv``), which read them
at tens of MB/s, well above the BPE encoder's ~10 MB/s, and need no dependency; Parquet is columnar
and compressed, so it needs ``pyarrow`` (the optional ``data`` extra): the one reader that brings
a dependency. Hugging Face ``datasets`` was not taken: it would read the same files through pyarrow
after copying them into its own Arrow cache, a second copy of a corpus the size of the disk.
"""
from __future__ import annotations

import csv
import glob
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..base.numbers import cut

BLOCK = 8 << 20  # bytes of a plain-text file read at a time
SNIFF = 1 << 16  # bytes checked up front to call a file text
KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet",
         ".gz": "gzip"}
INSTALL = "pip install 'tfamily[data]'"


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str  # text | gzip | jsonl | csv | parquet
    size: int  # bytes on disk

    @property
    def structured(self) -> bool:
        return self.kind in ("jsonl", "csv", "parquet")


def expand(patterns: list[str]) -> list[Source]:
    """Each SRC as files: a file itself, a folder's files (recursively, hidden ones skipped, sorted),
    a glob's matches (sorted). A name that is none of these, or a folder or glob with no file, is
    refused in one line."""
    if not patterns:
        raise ValueError("no sources given; pass files, folders or globs of text (or JSONL/CSV/Parquet)")
    paths: list[Path] = []
    for pattern in patterns:
        p = Path(pattern).expanduser()
        if p.is_file():
            found = [p]
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file()
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            if not found:
                raise ValueError(f"source folder {p} holds no files; pass a folder of text files")
        elif glob.has_magic(pattern):
            found = sorted(Path(f) for f in glob.glob(os.path.expanduser(pattern), recursive=True)
                           if os.path.isfile(f))
            if not found:
                raise ValueError(f"source {pattern!r} matches no file; check the pattern (quote it so the "
                                 f"shell does not expand it)")
        else:
            raise FileNotFoundError(f"source {pattern} does not exist; pass a file, a folder or a glob")
        paths += [f for f in found if f not in paths]
    return [Source(f, KINDS.get(f.suffix.lower(), "text"), f.stat().st_size) for f in paths]


def check(src: Source, column: str) -> None:
    """Refuse now what would fail later: a source that is not text, a missing column, Parquet
    without pyarrow. Reads the first ``SNIFF`` bytes (a Parquet file's schema)."""
    if src.kind == "parquet":
        names = _parquet(src.path).schema_arrow.names
        if column not in names:
            raise ValueError(_no_column(src.path, column, names))
        return
    with _open(src) as f:
        head = f.read(SNIFF)
    _check_text(head, src.path, 0, partial=True)
    if src.kind == "jsonl":
        for i, line in enumerate(head.split(b"\n")[:-1] if len(head) == SNIFF else head.split(b"\n"), 1):
            if line.strip():
                _field(_json_row(line, src.path, i), column, src.path, i)
                break
    elif src.kind == "csv":
        header = next(csv.reader(io.StringIO(head.decode("utf-8", "replace")), **_dialect(src)), [])
        if column not in header:
            raise ValueError(_no_column(src.path, column, header))


def read(src: Source, column: str, start: int = 0, end: int | None = None, check: bool = True) -> Iterator[tuple]:
    """``(piece, starts_document, bytes_read)`` for the documents of ``src``; a plain-text file may be
    read as its bytes ``start:end`` (the position split of a one-file corpus). ``check=False`` skips
    the UTF-8 check of a plain file's pieces (a second pass over a file the first checked)."""
    if src.kind in ("text", "gzip"):
        yield from _read_text(src, start, end, check)
    elif src.kind == "jsonl":
        yield from _read_jsonl(src, column)
    elif src.kind == "csv":
        yield from _read_csv(src, column)
    else:
        yield from _read_parquet(src, column)


def not_text(path, offset: int, why: str) -> ValueError:
    return ValueError(f"source {path} is not UTF-8 text ({why} at byte {offset}); pass text files (a folder's "
                      f"other files can be left out with a glob such as 'DIR/**/*.txt')")


def _check_text(data: bytes, path, offset: int, partial: bool = False) -> None:
    nul = data.find(b"\0")
    if nul >= 0:
        raise not_text(path, offset + nul, "a NUL byte")
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            if not (partial and e.start >= len(data) - 4 and e.reason == "unexpected end of data"):
                raise not_text(path, offset + e.start, e.reason) from None


def _open(src: Source):
    if src.kind == "gzip" or src.path.suffix.lower() == ".gz":
        return gzip.open(src.path, "rb")
    return open(src.path, "rb")


def _read_text(src: Source, start: int, end: int | None, check: bool = True) -> Iterator[tuple]:
    """Pieces of about BLOCK bytes, each ending after a newline (else at a character start)."""
    if src.kind == "text" and src.size:
        yield from _read_mapped(src, start, src.size if end is None else end, check)
        return
    first, pos, carry = True, start, b""  # pos: the file offset of carry's first byte
    try:
        with _open(src) as f:
            if start:
                f.seek(start)
            while True:
                want = BLOCK if end is None else min(BLOCK, end - pos - len(carry))
                block = f.read(want) if want > 0 else b""
                data = carry + block
                if not block:
                    if data or first:
                        _check_text(data, src.path, pos)
                        yield data, first, 0
                    return
                cut_at = data.rfind(b"\n") + 1 or _char_start(data)
                piece, carry = data[:cut_at], data[cut_at:]
                _check_text(piece, src.path, pos)
                pos += len(piece)
                if piece or first:
                    yield piece, first, len(block)
                    first = False
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise ValueError(f"source {src.path} is not a readable gzip file ({e}); replace it") from None


def _read_mapped(src: Source, start: int, end: int, check: bool) -> Iterator[tuple]:
    """``_read_text`` of a plain file through a map: each piece is one copy out of the page cache."""
    import mmap
    with open(src.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos, first = start, True
        while pos < end or first:
            stop = min(pos + BLOCK, end)
            cut_at = stop if stop == end else (mm.rfind(b"\n", pos, stop) + 1 or pos + _char_start(mm[pos:stop]))
            piece = mm[pos:cut_at]
            if check:
                _check_text(piece, src.path, pos)
            yield piece, first, cut_at - pos
            pos, first = cut_at, False


def _char_start(data: bytes) -> int:
    """len(data), less a UTF-8 character cut at its end."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return len(data)
        if b >= 0xC0:  # the lead byte of the last character
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _json_row(line: bytes, path, i: int) -> dict:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path} line {i} is not JSON ({cut(str(e), 80)}); write one JSON object a line, "
                         f'e.g. {{"text": "..."}}') from None
    if not isinstance(row, dict):
        raise ValueError(f"{path} line {i} is {cut(row)}, not a JSON object; write one object a line, "
                         f'e.g. {{"text": "..."}}')
    return row


def _no_column(path, column: str, names) -> str:
    return (f"{path} has no column {column!r} (its columns: {', '.join(map(str, list(names)[:20])) or 'none'}); "
            f"name the text column with --column")


def _field(row: dict, column: str, path, i) -> str:
    if column not in row:
        raise ValueError(_no_column(path, column, row) + f" (row {i})")
    value = row[column]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path} row {i}: column {column!r} holds {cut(value)}, not text; --column names the "
                         f"column with the documents' text")
    return value


def _read_jsonl(src: Source, column: str) -> Iterator[tuple]:
    with _open(src) as f:
        i = 0
        for line in f:
            i += 1
            if line.strip():
                _check_text(line, src.path, 0) if b"\0" in line else None
                yield _field(_json_row(line, src.path, i), column, src.path, i), True, len(line)
            else:
                yield "", True, len(line)


class _Counting(io.RawIOBase):
    """A binary file that counts the bytes read through it (the CSV reader's progress)."""

    def __init__(self, f):
        self.f, self.n = f, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(b)
        self.n += n
        return n


def _dialect(src: Source) -> dict:
    return {"delimiter": "\t"} if src.path.suffix.lower() == ".tsv" else {}


def _read_csv(src: Source, column: str) -> Iterator[tuple]:
    old = csv.field_size_limit()
    csv.field_size_limit(1 << 30)  # a document is one field: csv's 128 KiB default is far too small
    try:
        with _open(src) as raw:
            counted = _Counting(raw)
            text = io.TextIOWrapper(io.BufferedReader(counted, 1 << 20), encoding="utf-8", newline="")
            rows = csv.reader(text, **_dialect(src))
            header = next(rows, None) or []
            if column not in header:
                raise ValueError(_no_column(src.path, column, header))
            at, seen = header.index(column), 0
            for i, row in enumerate(rows, 2):
                value = row[at] if at < len(row) else ""
                if "\0" in value:
                    raise not_text(src.path, counted.n, "a NUL byte")
                yield value, True, counted.n - seen
                seen = counted.n
    except UnicodeDecodeError as e:
        raise not_text(src.path, e.start, e.reason) from None
    except csv.Error as e:
        raise ValueError(f"{src.path} is not valid CSV ({e}); save it as comma-separated text") from None
    finally:
        csv.field_size_limit(old)


def _parquet(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"reading Parquet ({path}) needs pyarrow: {INSTALL}") from None
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow's own error types
        raise ValueError(f"{path} is not a readable Parquet file ({cut(str(e), 120)}); replace it") from None


def _read_parquet(src: Source, column: str) -> Iterator[tuple]:
    pf = _parquet(src.path)
    total, done, seen = max(1, pf.metadata.num_rows), 0, 0
    if not str(pf.schema_arrow.field(column).type) in ("string", "large_string", "string_view"):
        raise ValueError(f"{src.path}: column {column!r} is {pf.schema_arrow.field(column).type}, not text; "
                         f"--column names the column with the documents' text")
    for batch in pf.iter_batches(columns=[column], batch_size=8192):
        values = batch.column(0).to_pylist()
        done += len(values)
        consumed = src.size * done // total
        for j, v in enumerate(values):
            yield (v or ""), True, (consumed - seen) if j == len(values) - 1 else 0
        seen = consumed
