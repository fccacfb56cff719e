"""The Universal Transformer's convolutional transition (Dehghani et al. 2019, section 2.1:
"a depth-wise separable convolution"; Chollet 2017): each separable convolution is a
depth-wise convolution over the sequence (one filter per channel) followed by a
point-wise linear map. As tensor2tensor's ``sepconv_relu_sepconv``: sepconv to d_ff, the
activation (t2t's is ReLU: ``ff.activation=relu``), sepconv back to d_model.

``causal`` (the builder passes the block's ``attn.pattern.causal``) pads on the left only:
position i sees i - k + 1 .. i, as a decoder must; otherwise the window is centred (an
encoder). Unlike the position-wise feed-forward, this one mixes neighbouring positions, so:
- with ``padding`` (b, n) bool (True = real), padded positions of each convolution's input
  are zeroed first, as t2t's sepconv with a nonpadding mask: real positions never read
  what a pad token holds;
- decoding from a KV cache, each causal convolution keeps its last k - 1 inputs in the
  layer's ``LayerState.parts`` and prepends them to the next call's inputs (zeros the
  first time, which is the left zero padding), so one new token sees the same window as
  a full recomputation. A centred window would need inputs not yet decoded: refused.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ...registry import ACTIVATIONS, FEEDFORWARDS
from ..dropout import maybe_dropout
from ..state import LayerState
from ...base.numbers import check_int


class SeparableConv1d(nn.Module):
    def __init__(self, d_in: int, d_out: int, kernel_size: int, causal: bool, bias: bool = True):
        super().__init__()
        check_int("separable convolution kernel_size", kernel_size, 1)
        self.depthwise = nn.Conv1d(d_in, d_in, kernel_size, groups=d_in, bias=False)
        self.pointwise = nn.Linear(d_in, d_out, bias=bias)
        self.causal = causal
        left = kernel_size - 1 if causal else (kernel_size - 1) // 2
        self.pad = (left, kernel_size - 1 - left)

    def forward(self, x: Tensor, *, padding: Tensor | None = None, state: LayerState | None = None,
                key: str = "sepconv") -> Tensor:
        """``x``: (b, n, d_in) -> (b, n, d_out). ``padding``: (b, n) bool, True = real.
        ``state``: the layer's state; a causal convolution carries its last k - 1 inputs
        there under ``key`` (b, k - 1, d_in), detached, between decoding calls."""
        if padding is not None:
            x = x * padding[..., None].to(x.dtype)
        if state is None:
            h = F.pad(rearrange(x, "b n d -> b d n"), self.pad)
        elif not self.causal:
            raise ValueError("a centred (non-causal) separable convolution cannot decode from a cache: its "
                             "window reads positions not yet given; it serves encoders, which run once over "
                             "the whole input (call without a state), or use a causal pattern")
        else:
            keep = self.pad[0]
            prev = state.parts.get(key)
            if prev is None:  # zeros: the left padding of the first call
                prev = x.new_zeros(x.shape[0], keep, x.shape[2])
            window = torch.cat([prev.to(x.dtype), x], dim=1)
            state.parts[key] = window[:, window.shape[1] - keep:].detach()
            h = rearrange(window, "b n d -> b d n")
        return self.pointwise(rearrange(self.depthwise(h), "b d n -> b n d"))


class SepConvTransition(nn.Module):
    """t2t's ``sepconv_relu_sepconv``: sepconv(d_model -> d_ff), activation, dropout,
    sepconv(d_ff -> d_model); each convolution keeps its own carry (``ff.inner``, ``ff.outer``)."""
    citation = "Dehghani et al. 2019, section 2.1: a separable-convolution transition (Chollet 2017)"

    def __init__(self, d_model: int, d_ff: int, kernel_size: int = 3, *, causal: bool,
                 activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.inner = SeparableConv1d(d_model, d_ff, kernel_size, causal, bias)
        self.act = ACTIVATIONS[activation]()
        self.outer = SeparableConv1d(d_ff, d_model, kernel_size, causal, bias)
        self.drop = maybe_dropout(dropout)

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d_model) -> (b, n, d_model); see the module docstring for both keywords."""
        h = self.drop(self.act(self.inner(x, padding=padding, state=state, key="ff.inner")))
        return self.outer(h, padding=padding, state=state, key="ff.outer")


# causal comes from the block's attention pattern (build.block): encoders centred, decoders causal.
FEEDFORWARDS.register("sepconv", SepConvTransition, needs=("d_model", "d_ff", "activation", "dropout", "causal", "bias"),
                      mixes_positions=True)
