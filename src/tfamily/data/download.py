"""Download, verify and install datasets listed in `DATASETS`.

The file is streamed to a temporary file beside its destination, checked
(md5 and/or size of the final, extracted file), flushed to disk and then
renamed into place with `os.replace`, which is atomic on POSIX: a reader sees
either no file or the complete verified one, never a partial download. On any
failure the temporary files are removed.

Command line: `python -m tfamily.data.download NAME [--data-dir DIR]`
(the `tfamily download` subcommand calls `main`).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..settings.schema import add_flags, setting
from .paths import ENV_VAR, DataNotFoundError, cache_dir, find_file
from .sources import DATASETS, Dataset

__all__ = ["ChecksumError", "DATASETS", "Dataset", "download", "md5_file", "verify_file", "add_arguments", "run", "main"]

_CHUNK = 1 << 20


class ChecksumError(ValueError):
    """A file's md5 or size differs from the expected one."""

    def __init__(self, what: str, kind: str, expected: object, got: object, note: str = ""):
        self.what, self.kind, self.expected, self.got, self.note = what, kind, expected, got, note
        super().__init__(f"{kind} mismatch for {what}: expected {expected}, got {got}.{note}")

    def __reduce__(self):
        return (type(self), (self.what, self.kind, self.expected, self.got, self.note))


def md5_file(path: str | os.PathLike, *, gunzip: bool = False) -> str:
    """Hex md5 of a file (of its decompressed content when gunzip=True)."""
    h = hashlib.md5()
    opener = gzip.open if gunzip else open
    with opener(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_file(path: str | os.PathLike, md5: str | None = None, size: int | None = None) -> None:
    """Raise ChecksumError unless `path` has the given size and md5 (None skips a check)."""
    path = Path(path)
    if size is not None and path.stat().st_size != size:
        raise ChecksumError(str(path), "size", f"{size} bytes", f"{path.stat().st_size} bytes")
    if md5 is not None:
        got = md5_file(path)
        if got != md5:
            raise ChecksumError(str(path), "md5", md5, got)


def _open_url(url: str):
    # A module-level hook so tests can stand in for the network if they need to.
    return urllib.request.urlopen(url, timeout=60)


def _copy_hashing(src, dst, total: int | None, desc: str, progress: bool) -> tuple[str, int]:
    """Copy a binary stream, returning (md5 hex, bytes copied)."""
    h, n = hashlib.md5(), 0
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=not progress) as bar:
        while chunk := src.read(_CHUNK):
            dst.write(chunk)
            h.update(chunk)
            n += len(chunk)
            bar.update(len(chunk))
    return h.hexdigest(), n


def _writable_dir(data_dir: str | os.PathLike | None) -> Path:
    """Where a download goes: `data_dir` if given, else $TFAMILY_DATA if writable, else the cache.

    The shared data directory is often read-only, so without an explicit
    `data_dir` an unwritable $TFAMILY_DATA falls back to the per-user cache
    (which `find_file` also searches).
    """
    if data_dir is not None:
        candidates = [Path(data_dir).expanduser()]
    else:
        env = os.environ.get(ENV_VAR)
        candidates = ([Path(env).expanduser()] if env else []) + [cache_dir()]
    errors = []
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            errors.append(f"{d}: {e.strerror or e}")
            continue
        if os.access(d, os.W_OK):
            return d
        errors.append(f"{d}: not writable")
    raise PermissionError("no writable data directory: " + "; ".join(errors) + ". Pass --data-dir DIR you can write to.")


def _lookup(name: str) -> Dataset:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; downloadable datasets are {sorted(DATASETS)}")
    return DATASETS[name]


def download(
    name: str, data_dir: str | os.PathLike | None = None, *, force: bool = False, progress: bool = True
) -> Path:
    """Fetch dataset `name`, verify it and return the path of the installed file.

    An already present file (in any searched directory) is returned as is
    unless force=True. Raises ChecksumError on a digest or size mismatch (the
    temporary file is deleted), and urllib's URLError/OSError when the
    network or URL fails.
    """
    ds = _lookup(name)
    if not force:
        try:
            return find_file(ds.filename, data_dir)
        except DataNotFoundError:
            pass
    dest_dir = _writable_dir(data_dir)
    final = dest_dir / ds.filename
    tmp_paths: list[str] = []

    def new_tmp() -> tuple[int, str]:
        fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f".{ds.filename}.", suffix=".part")
        tmp_paths.append(tmp)
        return fd, tmp

    try:
        fd, fetched = new_tmp()
        with _open_url(ds.url) as resp, os.fdopen(fd, "wb") as out:
            length = resp.headers.get("Content-Length") if getattr(resp, "headers", None) else None
            md5, size = _copy_hashing(resp, out, int(length) if length else None, ds.filename, progress)
        if ds.member is not None:
            md5, size, fetched = _extract(ds, fetched, new_tmp, progress)
        note = f" The download from {ds.url} was deleted; retry, or check the URL."
        if ds.size is not None and size != ds.size:
            raise ChecksumError(ds.filename, "size", f"{ds.size} bytes", f"{size} bytes", note)
        if ds.md5 is not None and md5 != ds.md5:
            raise ChecksumError(ds.filename, "md5", ds.md5, md5, note)
        with open(fetched, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(fetched, final)
        tmp_paths.remove(fetched)
    finally:
        for tmp in tmp_paths:
            Path(tmp).unlink(missing_ok=True)
    return final


def _extract(ds: Dataset, archive: str, new_tmp, progress: bool) -> tuple[str, int, str]:
    """Extract `ds.member` from the zip at `archive` into a new temp file."""
    try:
        with zipfile.ZipFile(archive) as zf:
            if ds.member not in zf.namelist():
                raise ValueError(
                    f"archive from {ds.url} has no member {ds.member!r}; it holds {zf.namelist()[:10]}"
                )
            info = zf.getinfo(ds.member)
            fd, out_path = new_tmp()
            with zf.open(info) as src, os.fdopen(fd, "wb") as out:
                md5, size = _copy_hashing(src, out, info.file_size, ds.member, progress)
    except zipfile.BadZipFile as e:
        raise ChecksumError(
            ds.url, "archive", "a valid zip file", f"a corrupt one ({e})", " The download was deleted; retry."
        ) from e
    return md5, size, out_path


@dataclass
class Settings:
    """`tfamily download NAME...`."""
    names: list[str] = setting([], positional="NAME", nargs="+", help=f"one or more of {sorted(DATASETS)}")
    data_dir: str | None = setting(None, flag=True,
                                   help=f"target directory (default: ${ENV_VAR} if writable, else the cache)")
    force: bool = setting(False, flag=True, help="download even if the file is already present")
    no_progress: bool = setting(False, flag=True, help="hide the progress bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tfamily download`."""
    add_flags(parser, Settings)


def run(args: argparse.Namespace) -> int:
    """Download every named dataset; print each installed path; return an exit code."""
    for name in args.names:
        if name not in DATASETS:
            print(f"tfamily download: error: unknown dataset {name!r}; choose from {sorted(DATASETS)}", file=sys.stderr)
            return 2
    for name in args.names:
        try:
            path = download(name, args.data_dir, force=args.force, progress=not args.no_progress)
        except (ChecksumError, urllib.error.URLError, ConnectionError, TimeoutError) as e:
            # the network or the server failed, not the request: exit status 4, as the README's table says
            print(f"tfamily download: error: {name}: {e}; retry later, or download it by hand into the data "
                  f"directory", file=sys.stderr)
            return 4
        except (OSError, ValueError) as e:
            print(f"tfamily download: error: {name}: {e}", file=sys.stderr)
            return 2
        print(path)
    return 0
