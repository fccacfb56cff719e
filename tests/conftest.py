"""Shared test set-up: one torch thread per xdist worker (2 workers on 2 cores),
deterministic seeds, and the data directory from TFAMILY_DATA or ../shared/data."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if "TFAMILY_DATA" not in os.environ and _SHARED.is_dir():
    os.environ["TFAMILY_DATA"] = str(_SHARED)

# Training's speed calibrations (train/calibrate.py) go to this process's own directory, never the
# user's cache; commands the tests start inherit it.
os.environ["TFAMILY_CALIBRATION"] = tempfile.mkdtemp(prefix="tfamily-calibration-")
atexit.register(shutil.rmtree, os.environ["TFAMILY_CALIBRATION"], True)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
