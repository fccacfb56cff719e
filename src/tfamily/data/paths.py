"""Where data files live.

Order of precedence, highest first:
1. the directory the user names (`--data-dir`, the `data_dir` argument);
2. the `TFAMILY_DATA` environment variable;
3. a per-user cache: `$XDG_CACHE_HOME/tfamily`, else `~/.cache/tfamily`
   (where `tfamily download` puts files by default).

`resolve_data_dir` answers "where should I look first / write";
`find_file` looks in all three, so a file downloaded into the cache is found
even when `TFAMILY_DATA` points at a read-only shared directory.
"""
from __future__ import annotations

import os
from pathlib import Path

from .sources import how_to_obtain

__all__ = ["DataNotFoundError", "cache_dir", "resolve_data_dir", "search_dirs", "find_file"]

ENV_VAR = "TFAMILY_DATA"


class DataNotFoundError(FileNotFoundError):
    """A data file is in none of the searched directories.

    `name` is the file looked for and `searched` the full paths tried, in order.
    """

    def __init__(self, name: str, searched: list[Path], how: str):
        self.name = name
        self.searched = list(searched)
        self.how = how
        tried = "\n".join(f"  {p}" for p in self.searched) or "  (no directory configured)"
        msg = (
            f"data file {name!r} not found. Searched:\n{tried}\n"
            f"To fix: {how}; or pass --data-dir DIR / set {ENV_VAR}=DIR to the directory that holds it."
        )
        super().__init__(msg)

    def __str__(self) -> str:
        # FileNotFoundError's own __str__ would print "[Errno None] ..." noise.
        return self.args[0]

    def __reduce__(self):
        # Rebuild from the constructor's arguments so the error survives
        # pickling (worker processes, torchrun) with its fields intact.
        return (type(self), (self.name, self.searched, self.how))


def _as_path(value: object, what: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what} must be a str or path, got {type(value).__name__} ({value!r})")
    text = os.fspath(value)
    if not text:
        raise ValueError(f"{what} is empty; pass a directory such as ~/data")
    return Path(text).expanduser()


def cache_dir() -> Path:
    """The per-user cache directory (it may not exist yet)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tfamily"


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The directories searched for data, highest precedence first, without duplicates."""
    dirs = []
    if data_dir is not None:
        explicit = _as_path(data_dir, "data_dir")
        if explicit.exists() and not explicit.is_dir():
            # Searching on past it would quietly read $TFAMILY_DATA instead of what was asked for.
            raise NotADirectoryError(f"data_dir {explicit} is a file, not a directory; pass the directory "
                                     f"that holds the data (--data-dir DIR)")
        dirs.append(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(_as_path(env, f"${ENV_VAR}"))
    dirs.append(cache_dir())
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory in force: `data_dir`, else `$TFAMILY_DATA`, else the cache."""
    return search_dirs(data_dir)[0]


def find_file(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of data file `name` in the first searched directory that has it.

    Raises DataNotFoundError (a FileNotFoundError) naming every path tried and
    how to obtain the file.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"find_file takes a bare file name such as 'kjv.txt', got {name!r}")
    searched = []
    for d in search_dirs(data_dir):
        path = d / name
        searched.append(path)
        if path.is_file():
            return path
    raise DataNotFoundError(name, searched, how_to_obtain(name))
