"""SIGKILL a training subprocess once it has written its halt flag (tests of resume after a kill)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest


def kill_when_flagged(proc: subprocess.Popen, flag: Path, what: str, timeout: float = 150) -> None:
    """Wait until ``flag`` exists (the run reached ``what``), then SIGKILL ``proc``; fail if it
    exits first or takes longer than ``timeout`` seconds."""
    try:
        deadline = time.monotonic() + timeout
        while not flag.exists():
            if proc.poll() is not None:
                pytest.fail(f"training exited ({proc.returncode}) before reaching {what}: {proc.stderr.read()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"training did not reach {what} in time")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
