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


def _one_thread_fp32() -> None:
    """Every width's calibration set to 1 thread, fp32: runs with the default settings then train
    alike on every CPU and at any load (no test depends on what a calibration would pick, or on a note
    about the load), and none spends its first seconds timing. tests/train/test_calibrate.py takes its
    own in a directory of its own."""
    from tfamily.base.hardware import cores, cpu_model
    from tfamily.train import calibrate as cal
    width = cal.WIDTHS[0]
    while width <= cal.WIDTHS[1]:
        cal.write(cal.Calibration(width, 1, "fp32", {"1/fp32": 1e9}, cpu_model(), cores(),
                                  torch.__version__.split("+")[0], 0.0, "fixed by tests/conftest.py"))
        width *= 2


_one_thread_fp32()


def _catalogue_rows() -> None:
    """The catalogue's row format (``R``, ``run_row``) as module ``catalogue_rows`` for the catalogue files
    that reuse it: tests/ is not a package under --import-mode=importlib, so it is loaded by path once."""
    spec = importlib.util.spec_from_file_location("catalogue_rows",
                                                  Path(__file__).parent / "test_catalogue_every_command.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)


try:
    _catalogue_rows()
except ImportError:  # a run with optional packages blocked (tests/cuda's import check) has no catalogue
    sys.modules.pop("catalogue_rows", None)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
