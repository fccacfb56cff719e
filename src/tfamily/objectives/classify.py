"""Classification: one class per input, read by the model's head (``models/classifier.py``)."""
from __future__ import annotations

from torch import Tensor, nn

from ..numbers import check_int
from .lm import need, token_loss


class Classification(nn.Module):
    """Cross-entropy of the class logits: batch ``{"x": (b, n), "y": (b,)[, "key_padding": (b, n)]}``
    (``key_padding`` True on real tokens). Accuracy and the count are per example."""

    def __init__(self, n_classes: int):
        super().__init__()
        self.n_classes = check_int("objective.params.n_classes", n_classes, 2,
                                   hint="the number of classes of the task, e.g. 10 for ListOps")

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x", "y")
        return token_loss(model(batch["x"], key_padding=batch.get("key_padding")), batch["y"])
