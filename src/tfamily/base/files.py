"""Writing a whole file or folder so that a reader, or the next run after a kill, finds the old one or
the new one, never half of one: the bytes go to a temporary file (or folder) beside the target (same
filesystem, so the rename is atomic) and a rename puts it in place."""
from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes, mode: int | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically and return the path. ``mode``: the
    file's permission bits; None gives what ``open()`` gives (0666 less the umask)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def fsync_path(path: str | Path) -> None:
    """Flush a file's bytes, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(tmp: str | Path, final: str | Path) -> Path:
    """Put the finished folder ``tmp`` at ``final`` (beside it): its entries are flushed first; an
    existing ``final`` is renamed aside to a dot-name (which no reader takes for it) and deleted only once
    ``tmp`` is in its place, and put back if that rename fails. Checkpoints, prepared corpora and
    Hugging Face exports are written this way."""
    tmp, final = Path(tmp), Path(final)
    fsync_path(tmp)
    old = final.with_name(f".del-{final.name}-{os.getpid()}") if final.exists() else None
    if old is not None:
        final.rename(old)
    try:
        tmp.rename(final)
    except OSError:
        if old is not None:
            old.rename(final)
        raise
    fsync_path(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def same_mode(like: Path, files: list[Path]) -> None:
    """Give ``files`` the mode of ``like``: safetensors creates its files 0600 whatever the umask,
    while Python's open() gives the JSON beside them 0666 less the umask."""
    mode = like.stat().st_mode & 0o777
    for f in files:
        os.chmod(f, mode)


def sha256(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in 8 MiB blocks (checkpoints, prepared shards, sources)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()
