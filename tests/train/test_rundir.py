"""One writer per run directory: a live holder is named and refused, a dead one's lock is
taken over, with and without flock."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tfamily.train import rundir

HOLD = textwrap.dedent("""
    import sys, time
    from tfamily.train.rundir import RunLock
    lock = RunLock(sys.argv[1])
    print("held", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def holder(tmp_path):
    """A live process holding tmp_path/run."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        yield p
    finally:
        p.kill()
        p.wait()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, holder):
    with pytest.raises(rundir.RunDirLocked) as info:
        rundir.RunLock(tmp_path / "run")
    msg = str(info.value)
    assert f"pid {holder.pid}" in msg and str(tmp_path / "run") in msg and "another --out" in msg
    holder.kill()
    holder.wait()
    rundir.RunLock(tmp_path / "run").release()  # the kernel dropped the dead holder's flock


def test_a_stale_lock_of_a_dead_pid_is_taken_over_and_released(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.LOCK).write_text(json.dumps({"pid": _dead_pid(), "host": os.uname().nodename, "started": 0}))
    lock = rundir.RunLock(run)
    assert json.loads((run / rundir.LOCK).read_text())["pid"] == os.getpid()
    with pytest.raises(rundir.RunDirLocked, match=f"pid {os.getpid()}"):
        rundir.RunLock(run)  # held, even by this very process
    lock.release()
    with rundir.RunLock(run):
        pass


@pytest.mark.parametrize("alive", [True, False])
def test_without_flock_a_live_pid_on_this_host_holds_the_directory(tmp_path, monkeypatch, alive):
    import socket
    run = tmp_path / "run"
    run.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) if alive else None
    pid = other.pid if alive else _dead_pid()
    (run / rundir.LOCK).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started": 0}))

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(rundir.fcntl, "flock", no_flock)
    try:
        if alive:
            with pytest.raises(rundir.RunDirLocked, match=f"pid {pid}"):
                rundir.RunLock(run)
        else:
            rundir.RunLock(run).release()
    finally:
        if other is not None:
            other.kill()
            other.wait()
