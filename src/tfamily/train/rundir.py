"""One writer per run directory.

Two runs writing one ``--out`` interleave ``train.csv`` rows, overwrite ``config.yaml`` and
race on checkpoint renames. The writer holds ``<run>/.lock``: an ``flock`` on it (released by
the kernel when the process dies, however it dies) plus the holder's pid, host and start
time as JSON, so a refused second writer is told who holds the directory. A lock file left
by a dead process is not held, so the next run takes it over. Where the file system has no
``flock`` (some network mounts), the recorded pid decides: alive on this host means held.

The trainer takes the lock before anything else reads or writes the directory (before the
autotune, the data, the build and the first save) and keeps it to the end, so two runs started
together on one ``--out`` never both get past the start: the second is refused in one line
while the first holds the directory, or, once the first has finished, because the directory
has checkpoints (``--resume`` continues it). The tests hold a process at each stage of its start-up
(``callbacks.SeesStages``) to check that.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ..base.textload import load_json, read_text

LOCK = ".lock"


class RunDirLocked(ValueError):
    """Another live process is writing this run directory; ``holder`` names it."""

    holder = "another process"


def _holder(path: Path) -> dict:
    try:
        info = load_json(read_text(path) or "{}", str(path))  # bounded: a deep or huge lock file is not a holder
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _describe(info: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["started"])) if isinstance(
        info.get("started"), (int, float)) else "an unknown time"
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')} (started {when})"


class RunLock:
    """Held from construction until ``release()`` (or process exit). ``name``: the lock file in
    ``run_dir`` (a grid's lock on its cell is another file than the lock of the run inside it)."""

    _fd: int | None = None

    def __init__(self, run_dir: str | Path, name: str = LOCK):
        self.path = Path(run_dir) / name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._take()
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(me).encode(), 0)

    def _take(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            self._refuse(_holder(self.path))
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        info = _holder(self.path)  # no flock here: trust a live pid on this host
        if info.get("host") == socket.gethostname() and info.get("pid") != os.getpid() and _alive(info.get("pid")):
            self._refuse(info)

    def _refuse(self, info: dict) -> None:
        err = RunDirLocked(f"run directory {self.path.parent} is in use by {_describe(info)}; wait for that run "
                           f"to finish (or stop it), or pick another --out")
        err.holder = _describe(info)
        raise err

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
