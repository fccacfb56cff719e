"""Chunking along the sequence (Kitaev et al. 2020, section 3): any position-wise part applied
in c pieces, so only one piece's d_ff activations live at once; the output is identical
because the part is position-wise. Chunking (``FeedForwardSpec.chunks``) wraps any registered
part, so it is not a registered choice itself."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..state import LayerState
from ...base.numbers import check_int


class Chunked(nn.Module):
    """``inner`` applied to ``chunks`` consecutive pieces of the sequence (sizes differ by at
    most one when ``chunks`` does not divide the length; shorter sequences use fewer pieces).

    With ``checkpoint`` (default), while autograd records, each piece runs under activation
    checkpointing: the backward pass recomputes one piece's d_ff activations at a time
    (Kitaev et al. 2020, section 3: "the reverse computation and the backward pass are also
    chunked"), at the price of one more forward of the part. Without it, chunking only
    bounds the forward pass's transient memory, since autograd keeps every piece.
    ``inner`` must be position-wise (spec/part_checks.py refuses chunking a convolution, whose window
    would be cut at the pieces' edges), so ``state`` and ``padding`` are not passed on."""
    citation = "Kitaev et al. 2020, section 3: the feed-forward computed in chunks along the sequence"

    def __init__(self, inner: nn.Module, chunks: int, checkpoint: bool = True):
        super().__init__()
        check_int("feed-forward chunks", chunks, 1)
        self.inner, self.chunks, self.checkpoint = inner, chunks, checkpoint

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d) -> (b, n, d_out)."""
        if self.chunks == 1 or x.shape[1] <= 1:
            return self.inner(x)
        pieces = torch.tensor_split(x, min(self.chunks, x.shape[1]), dim=1)
        if self.checkpoint and torch.is_grad_enabled():
            return torch.cat([checkpoint(self.inner, c, use_reentrant=False) for c in pieces], dim=1)
        return torch.cat([self.inner(c) for c in pieces], dim=1)
