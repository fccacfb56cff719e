"""A dual encoder for matching two inputs, Long Range Arena's Retrieval setting (Tay et al. 2021,
section 3.3: "a two-tower model" whose towers share weights, so each document is encoded alone and
the task needs a compressed representation of it).

One encoder (a ``Classifier`` trunk whose head is only its pooling) reads each input; its pooled
vectors ``u`` and ``v`` are combined as ``[u, v, u * v, u - v]`` (LRA after Conneau et al. 2017,
section 3.2, InferSent's combination) and an MLP maps that to class logits. Batches are
``{"x": (b, 2, n), "y": (b,), "key_padding": (b, 2, n)}``: the pair side by side on dim 1.
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from .hooks import ForwardsHooks


class PairHead(nn.Module):
    """``u``, ``v`` (b, d) -> (b, n_classes) through an MLP over ``[u, v, u * v, u - v]``."""

    def __init__(self, d_model: int, n_classes: int, d_hidden: int | None = None):
        super().__init__()
        d_hidden = d_hidden or d_model
        self.mlp = nn.Sequential(nn.Linear(4 * d_model, d_hidden), nn.ReLU(), nn.Linear(d_hidden, n_classes))

    def forward(self, u: Tensor, v: Tensor) -> Tensor:
        return self.mlp(torch.cat([u, v, u * v, u - v], -1))


class DualEncoder(ForwardsHooks, nn.Module):
    """``encoder`` ((b, n) tokens, key_padding -> (b, d)) shared by both inputs, then ``head``."""

    def __init__(self, encoder: nn.Module, head: PairHead, objective: nn.Module):
        super().__init__()
        self.encoder, self.head, self.objective = encoder, head, objective

    def forward(self, tokens: Tensor, *, key_padding: Tensor | None = None) -> Tensor:
        """``tokens``: (b, 2, n) ids (a pair per row) -> class logits (b, n_classes)."""
        flat = rearrange(tokens, "b two n -> (b two) n", two=2)
        real = None if key_padding is None else rearrange(key_padding, "b two n -> (b two) n", two=2)
        u, v = rearrange(self.encoder(flat, key_padding=real), "(b two) d -> two b d", two=2)
        return self.head(u, v)
