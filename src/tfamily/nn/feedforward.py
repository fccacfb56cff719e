"""The feed-forward axis: what runs at each position.

Vaswani et al. 2017, eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2; GELU as in
BERT/GPT. ``Chunked`` applies any position-wise part in c pieces along the
sequence (Kitaev et al. 2020, section 3) so only one chunk's d_ff activations
live at once; the output is identical because the part is position-wise.

Every feed-forward part is called ``ff(x, *, state=None, padding=None)`` (``FeedForward``):
position-wise parts ignore both keywords; a part that mixes positions (``nn/sepconv.py``)
reads the padding and carries what it needs between decoding calls in the layer's state.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..registry import ACTIVATIONS, FEEDFORWARDS
from .cache import LayerState
from .dropout import maybe_dropout

ACTIVATIONS.register("relu", nn.ReLU)
ACTIVATIONS.register("gelu", nn.GELU)
# GPT-2's (and BERT's released code's) tanh approximation of GELU (Hendrycks & Gimpel 2016, section 2).
ACTIVATIONS.register("gelu_tanh", lambda: nn.GELU(approximate="tanh"))


class FeedForward(Protocol):
    """``x``: (b, n, d) -> (b, n, d). ``state``: the layer's ``LayerState`` (or None);
    ``padding``: (b, n) bool over x, True = real position (``own_padding``)."""

    def __call__(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor: ...


def own_padding(key_padding: Tensor | None, n: int) -> Tensor | None:
    """The columns of a self-attention ``key_padding`` that cover the ``n`` new positions: with
    a KV cache it covers the cached keys first, then this call's."""
    return None if key_padding is None else key_padding[:, key_padding.shape[1] - n:]


class MLP(nn.Module):
    """``dropout`` acts on the hidden activations (the Transformer's tensor2tensor code and
    BERT do not; the spec's ``ff_dropout`` says where each member drops)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff, bias=bias), ACTIVATIONS[activation](),
                                 maybe_dropout(dropout), nn.Linear(d_ff, d_model, bias=bias))

    @property
    def out_proj(self) -> nn.Linear:
        """The linear layer whose output joins the residual stream (``nn/init.py``)."""
        return self.net[-1]

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """Position-wise: ``state`` and ``padding`` are not needed."""
        return self.net(x)


class Chunked(nn.Module):
    """``inner`` applied to ``chunks`` consecutive pieces of the sequence (sizes differ by at
    most one when ``chunks`` does not divide the length; shorter sequences use fewer pieces).

    With ``checkpoint`` (default), while autograd records, each piece runs under activation
    checkpointing: the backward pass recomputes one piece's d_ff activations at a time
    (Kitaev et al. 2020, section 3: "the reverse computation and the backward pass are also
    chunked"), at the price of one more forward of the part. Without it, chunking only
    bounds the forward pass's transient memory, since autograd keeps every piece.
    ``inner`` must be position-wise (checks.py refuses chunking a convolution, whose window
    would be cut at the pieces' edges), so ``state`` and ``padding`` are not passed on."""

    def __init__(self, inner: nn.Module, chunks: int, checkpoint: bool = True):
        super().__init__()
        if isinstance(chunks, bool) or not isinstance(chunks, int):
            raise TypeError(f"feed-forward chunks must be an integer, got {chunks!r}")
        if chunks < 1:
            raise ValueError(f"feed-forward chunks must be >= 1, got {chunks}")
        self.inner, self.chunks, self.checkpoint = inner, chunks, checkpoint

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d) -> (b, n, d_out)."""
        if self.chunks == 1 or x.shape[1] <= 1:
            return self.inner(x)
        pieces = torch.tensor_split(x, min(self.chunks, x.shape[1]), dim=1)
        if self.checkpoint and torch.is_grad_enabled():
            return torch.cat([checkpoint(self.inner, c, use_reentrant=False) for c in pieces], dim=1)
        return torch.cat([self.inner(c) for c in pieces], dim=1)


# Chunking (FeedForwardSpec.chunks) wraps any registered part, so it is not a choice here.
FEEDFORWARDS.register("mlp", MLP, needs=("d_model", "d_ff", "activation", "dropout", "bias"))
