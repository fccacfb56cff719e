"""The init Protocol: a scheme starts the linear layers and the tables the builder hands it.

``writes_residual`` marks the projection whose output joins the stream (attention's output
projection, the feed-forward's last layer): GPT-2 scales exactly those (``schemes.Normal``).
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor, nn


class InitScheme(Protocol):
    def linear(self, layer: nn.Linear, *, writes_residual: bool) -> None: ...

    def table(self, weight: Tensor) -> None:
        """An embedding or position table, (rows, d)."""
