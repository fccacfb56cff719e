"""The equivalence suite on the device at hand (``make test-cuda`` on a GPU).

Every test here takes the ``device`` fixture: "cuda" where a GPU is present, else "cpu", where
the same checks run at tiny sizes inside ``make test`` (so each one is seen to pass, and could
fail, before a GPU is lent). ``make test-cuda`` runs this folder with the GPU image's own
python3 from the source tree: no venv, no compiled CPU extension, and none of gymnasium, popgym
or tensorboard (``test_imports_on_device.py`` checks that). Helpers come from the CPU tests
(``tests.models.test_decoder_members`` ...), so the repository root goes on ``sys.path``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CUDA = torch.cuda.is_available()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if CUDA else "cpu")


@pytest.fixture(autouse=True)
def _full_fp32_on_the_gpu():
    """cuDNN (the RNN members, convolutions) uses TF32 by default, ~1e-3 off fp32 references."""
    if not CUDA:
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
