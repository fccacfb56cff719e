"""The Universal Transformer's convolutional transition (Dehghani et al. 2019, section 2.1:
"a depth-wise separable convolution"; Chollet 2017): each separable convolution is a
depth-wise convolution over the sequence (one filter per channel) followed by a
point-wise linear map. As tensor2tensor's ``sepconv_relu_sepconv``: sepconv to d_ff, ReLU,
sepconv back to d_model. ``causal`` pads on the left only (the decoder: position i sees
i - k + 1 .. i); otherwise the window is centred.

Unlike the feed-forward transition this one mixes neighbouring positions, so it sees
padded positions next to real ones and cannot run on one new token from a KV cache.
"""
from __future__ import annotations

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn


class SeparableConv1d(nn.Module):
    def __init__(self, d_in: int, d_out: int, kernel_size: int, causal: bool):
        super().__init__()
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1:
            raise ValueError(f"separable convolution kernel_size must be an integer >= 1, got {kernel_size!r}")
        self.depthwise = nn.Conv1d(d_in, d_in, kernel_size, groups=d_in, bias=False)
        self.pointwise = nn.Linear(d_in, d_out)
        left = kernel_size - 1 if causal else (kernel_size - 1) // 2
        self.pad = (left, kernel_size - 1 - left)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (b, n, d_in) -> (b, n, d_out)."""
        h = self.depthwise(F.pad(rearrange(x, "b n d -> b d n"), self.pad))
        return self.pointwise(rearrange(h, "b d n -> b n d"))


class SepConvTransition(nn.Module):
    def __init__(self, d_model: int, d_ff: int, kernel_size: int = 3, *, causal: bool, dropout: float = 0.0):
        super().__init__()
        self.inner = SeparableConv1d(d_model, d_ff, kernel_size, causal)
        self.outer = SeparableConv1d(d_ff, d_model, kernel_size, causal)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.drop(F.relu(self.inner(x))))
