"""Classification: one class per input, read by the model's head (``models/classifier.py``)."""
from __future__ import annotations

from torch import Tensor, nn

from ..base.numbers import check_int
from .lm import need, token_loss


class Classification(nn.Module):
    """Cross-entropy of the class logits: batch ``{"x": (b, n), "y": (b,)[, "key_padding": (b, n)]}``
    (``key_padding`` True on real tokens). Accuracy and the count are per example.

    ``pool``: which position the head reads (build.py makes the part): None for the trunk's rule
    (``models/classifier.py``), or 'first' (BERT's [CLS], which an imported BERT or RoBERTa was
    pre-trained to fill), 'last' (the last real token), 'mean' (over the real tokens)."""

    POOLS = ("first", "last", "mean")

    def __init__(self, n_classes: int, pool: str | None = None):
        super().__init__()
        self.n_classes = check_int("objective.params.n_classes", n_classes, 2,
                                   hint="the number of classes of the task, e.g. 10 for ListOps")
        if pool is not None and pool not in self.POOLS:
            raise ValueError(f"objective.params.pool={pool!r} is not a pooling; valid: {', '.join(self.POOLS)} or "
                             f"null (the trunk's rule)")
        self.pool = pool

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x", "y")
        return token_loss(model(batch["x"], key_padding=batch.get("key_padding")), batch["y"])
