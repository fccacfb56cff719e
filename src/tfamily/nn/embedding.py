"""Token embedding and output head. Vaswani et al. 2017, section 3.4: embeddings are
multiplied by sqrt(d_model) and share their weights with the pre-softmax projection."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, scale: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * d_model ** -0.5)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: Tensor) -> Tensor:
        check_tokens(tokens, self.vocab_size)
        return nn.functional.embedding(tokens, self.weight) * self.scale


class LMHead(nn.Module):
    """Pre-softmax projection, tied to the embedding when one is given."""

    def __init__(self, d_model: int, vocab_size: int, tied: TokenEmbedding | None = None):
        super().__init__()
        self.tied = tied
        self.proj = None if tied is not None else nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        if self.tied is not None:
            return x @ self.tied.weight.t()
        return self.proj(x)


def check_tokens(tokens: Tensor, vocab_size: int) -> None:
    if not isinstance(tokens, Tensor) or tokens.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got "
                        f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq_len), got {tuple(tokens.shape)}")
    if tokens.numel() and tokens.device.type != "cpu":
        # Reading min/max back would stall the host on every forward; the device checks
        # instead (an out-of-range id would otherwise fail inside the embedding's gather
        # with no hint which id or table).
        torch._assert_async(((tokens >= 0) & (tokens < vocab_size)).all(),
                            f"a token id is outside the vocabulary [0, {vocab_size - 1}]; "
                            f"raise vocab_size or fix the tokenizer")
    elif tokens.numel():
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size - 1}]; "
                             f"raise vocab_size or fix the tokenizer")
