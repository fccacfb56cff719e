"""One Transformer layer: self-attention, optional cross-attention, feed-forward,
each joined to the stream by its own residual part (passed in, never flagged)."""
from __future__ import annotations

from torch import Tensor, nn

from .attention import Attention
from .feedforward import FeedForward, own_padding
from .residual import Residual
from .state import LayerState


class Block(nn.Module):
    def __init__(self, attn: Attention, ff: FeedForward, attn_residual: Residual, ff_residual: Residual,
                 cross: Attention | None = None, cross_residual: Residual | None = None):
        super().__init__()
        self.attn, self.ff = attn, ff
        self.attn_residual, self.ff_residual = attn_residual, ff_residual
        self.cross, self.cross_residual = cross, cross_residual

    def forward(self, x: Tensor, *, key_padding: Tensor | None = None, context: Tensor | None = None,
                context_padding: Tensor | None = None, state: LayerState | None = None,
                global_tokens: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d). ``state`` carries this layer's caches and XL memory; the feed-forward
        gets it too, with the padding of x (a convolution carries inputs and skips pads).
        ``global_tokens``: (b, n) bool, for an attention with global tokens (``nn/heads/global_qkv.py``)."""
        padding = own_padding(key_padding, x.shape[1])
        cache = state.cache if state is not None else None
        memory, key_padding = state.attention_memory(key_padding, x) if state is not None else (None, key_padding)
        h = self.attn_residual.pre(x)
        if memory is not None:
            memory = self.attn_residual.pre(memory)
        extra = {} if global_tokens is None else {"global_tokens": global_tokens}
        x = self.attn_residual.post(x, self.attn(h, key_padding=key_padding, cache=cache, memory=memory, **extra))
        if self.cross is not None:
            cross_cache = state.cross_cache if state is not None else None
            h = self.cross_residual.pre(x)
            x = self.cross_residual.post(x, self.cross(h, context=context, key_padding=context_padding,
                                                      cache=cross_cache))
        return self.ff_residual.post(x, self.ff(self.ff_residual.pre(x), state=state, padding=padding))
