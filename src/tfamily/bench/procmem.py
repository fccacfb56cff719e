"""Peak memory of one piece of CPU work, measured from the kernel's view of the process.

torch's CPU allocator does not report to ``tracemalloc`` and keeps no peak counter, so
we read the resident set from /proc/self/status: ``VmHWM`` is its high-water mark, and
writing "5" to /proc/self/clear_refs resets that mark to the current resident size
(Linux >= 4.0). ``peak_mb(fn)`` is then the most resident memory ``fn`` added above
what was resident when it started. To make resident size track live tensors, the
measuring process must start with glibc's mmap threshold fixed (``worker_env()``):
every allocation above 128 KiB is then its own mapping, returned to the system when
freed. With glibc's default, large blocks freed early stay in the heap's free lists and
are reused (and stay resident) later, so the resident size would mix live tensors with
heap fragmentation. A mapping per allocation costs page faults, so timed runs use a
separate process with the default allocator. Each configuration runs in a fresh process.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess

ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def worker_env() -> dict:
    """The environment for a process that measures peak memory."""
    return {**os.environ, **ALLOCATOR_ENV}


def run_worker(cmd: list[str], what: str, env: dict | None = None, tail: int = 2000):
    """Run a benchmark's worker process and return the JSON of the last line it prints; a
    failure raises naming ``what``, with the last ``tail`` characters of its stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-tail:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def allocator_tracked() -> bool:
    """Was this process started with ``worker_env()``?"""
    return all(os.environ.get(k) == v for k, v in ALLOCATOR_ENV.items())


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _status(field: str) -> float:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    if m is None:
        raise RuntimeError(f"/proc/self/status has no {field}; peak memory needs Linux")
    return int(m.group(1)) / 1024


def rss_mb() -> float:
    return _status("VmRSS")


def reset_peak() -> bool:
    """Reset the high-water mark to the current resident size; False where not allowed."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mb(fn) -> tuple[object, float, bool]:
    """Run ``fn()``; return its result, the peak resident MiB it added, and whether the
    figure is exact (high-water mark reset, allocator tracked: see the module docstring)."""
    exact = reset_peak() and allocator_tracked()
    start = rss_mb()
    result = fn()
    return result, max(0.0, _status("VmHWM") - start), exact
