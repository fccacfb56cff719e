"""The token embedding (Vaswani et al. 2017, section 3.4: multiplied by sqrt(d_model); GPT-2
adds it unscaled, ``scale=False``) and the check every model's input passes first."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..tracing import recording


class TokenEmbedding(nn.Module):
    citation = ("Vaswani et al. 2017, section 3.4: embedding weights multiplied by sqrt(d_model) (scale_embeddings); "
                "GPT-2 adds them unscaled (Radford et al. 2019)")

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * d_model ** -0.5)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: Tensor) -> Tensor:
        check_tokens(tokens, self.vocab_size)
        return nn.functional.embedding(tokens, self.weight) * self.scale


def check_tokens(tokens: Tensor, vocab_size: int) -> None:
    if not isinstance(tokens, Tensor) or tokens.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got "
                        f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq_len), got {tuple(tokens.shape)}")
    if tokens.numel() == 0:  # a mean over no positions is NaN, and nothing downstream says why
        raise ValueError(f"tokens have shape {tuple(tokens.shape)}: an empty batch or sequence; pass at "
                         f"least one row of at least one token")
    if tokens.device.type != "cpu" or recording():
        # Reading min/max back would stall the host on every forward (and break a compiled or
        # exported graph in two, or vanish from a traced one); the device checks instead (an
        # out-of-range id would otherwise fail inside the embedding's gather with no hint which
        # id or table).
        torch._assert_async(((tokens >= 0) & (tokens < vocab_size)).all(),
                            f"a token id is outside the vocabulary [0, {vocab_size - 1}]; "
                            f"raise vocab_size or fix the tokenizer")
    else:
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size - 1}]; "
                             f"raise vocab_size or fix the tokenizer")
