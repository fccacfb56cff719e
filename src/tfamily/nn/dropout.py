"""Dropout that costs nothing when it is off."""
from __future__ import annotations

from torch import nn


def maybe_dropout(p: float) -> nn.Module:
    """``nn.Dropout(p)``, or ``nn.Identity()`` when ``p == 0``: an ``nn.Dropout(0)`` still
    costs a module call and ``F.dropout``'s checks every time (19 calls per token of a
    6-layer GPT's decoding: 0-4% of its time at batch 1, ``experiments/training/ab_hot_path.py``)."""
    return nn.Dropout(p) if p else nn.Identity()
