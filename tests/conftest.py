"""Shared test set-up: one torch thread per xdist worker (2 workers on 2 cores),
deterministic seeds, and the data directory from TFAMILY_DATA or ../shared/data."""
from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
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


def _catalogue_rows() -> None:
    """The catalogue's row format (``R``, ``run_row``) as module ``catalogue_rows`` for the catalogue files
    that reuse it: tests/ is not a package under --import-mode=importlib, so it is loaded by path once."""
    spec = importlib.util.spec_from_file_location("catalogue_rows",
                                                  Path(__file__).parent / "test_catalogue_every_command.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)


_catalogue_rows()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
