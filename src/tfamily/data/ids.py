"""Token ids handed to a vocabulary's ``decode``, checked the same way by every vocabulary."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def ids_to_numpy(ids: Any) -> np.ndarray:
    """Accept a tensor, an array, an int or a sequence of ints; return int64 numpy."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"decode expects a 1-D sequence of ids, got shape {tuple(arr.shape)}; decode one row at a time")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"decode expects integer ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def check_range(arr: np.ndarray, size: int, vocab: str) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= size):
        bad = int(arr[(arr < 0) | (arr >= size)][0])
        raise ValueError(f"id {bad} is outside the {vocab} vocabulary (valid ids are 0..{size - 1})")
