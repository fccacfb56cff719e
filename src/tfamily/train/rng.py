"""A process's random states (torch CPU and CUDA, numpy, Python), captured into a checkpoint's
tensors and meta and restored from them, so a resumed run draws what the uninterrupted one would."""
from __future__ import annotations

import random

import numpy as np
import torch
from torch import Tensor


def seed_all(seed: int) -> None:
    """Seed torch, numpy and Python's generators from one run seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> tuple[dict[str, Tensor], dict]:
    """This process's torch (CPU and CUDA), numpy and Python RNG states."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    tensors["numpy"] = torch.from_numpy(keys.astype(np.int64))
    version, internal, gauss_next = random.getstate()
    meta = {"numpy": {"kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
            "python": {"version": version, "state": list(internal), "gauss_next": gauss_next}}
    return tensors, meta


def restore_rng(tensors: dict[str, Tensor], meta: dict, torch_state: Tensor | None = None) -> None:
    """Inverse of ``capture_rng``; ``torch_state`` overrides the CPU generator (per-rank states)."""
    torch.set_rng_state(torch_state if torch_state is not None else tensors["torch"])
    cuda = sorted((int(k.split(".")[1]), v) for k, v in tensors.items() if k.startswith("cuda."))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([v for _, v in cuda][: torch.cuda.device_count()])
    n = meta["numpy"]
    np.random.set_state((n["kind"], tensors["numpy"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached"]))
    p = meta["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))
