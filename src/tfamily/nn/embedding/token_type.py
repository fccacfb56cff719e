"""Token types (segments). Devlin et al. 2019, section 3 (input representation): "we add a
learned embedding to every token indicating whether it belongs to sentence A or sentence B", so
one input can hold a sentence pair. ``TokenTypes`` holds one learned row per type and adds the
row of each token's type to its input; tokens given no types are all type 0 (a single segment).
``NoTokenTypes`` is the model without the table: it adds nothing and refuses types it cannot read.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..tracing import recording


class TokenTypes(nn.Module):
    def __init__(self, n_types: int, d_model: int):
        super().__init__()
        self.n_types = n_types
        self.weight = nn.Parameter(torch.randn(n_types, d_model) * d_model ** -0.5)

    def forward(self, x: Tensor, types: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d) token inputs; ``types``: (b, n) ids in [0, n_types), or None (all 0)."""
        if types is None:
            return x + self.weight[0]
        _check(types, tuple(x.shape[:2]), self.n_types)
        return x + nn.functional.embedding(types, self.weight)


class NoTokenTypes(nn.Module):
    def forward(self, x: Tensor, types: Tensor | None = None) -> Tensor:
        if types is not None:
            raise ValueError("token_types given, but this model has no token-type table (spec token_types=0), "
                             "so it cannot tell the segments of a pair apart; build it with token_types=2 "
                             "(BERT's sentence A and B), or import a checkpoint whose type_vocab_size is 2")
        return x


def _check(types: Tensor, shape: tuple[int, int], n_types: int) -> None:
    if not isinstance(types, Tensor) or types.dtype not in (torch.long, torch.int32):
        raise TypeError(f"token_types must be an integer tensor, got {getattr(types, 'dtype', type(types).__name__)}")
    if tuple(types.shape) != shape:
        raise ValueError(f"token_types have shape {tuple(types.shape)} but the tokens {shape}; pass one type per token")
    if types.device.type != "cpu" or recording():  # no host sync (see check_tokens in token.py)
        torch._assert_async(((types >= 0) & (types < n_types)).all(),
                            f"a token type is outside [0, {n_types - 1}]; pass types below the model's token_types")
        return
    lo, hi = int(types.min()), int(types.max())
    if lo < 0 or hi >= n_types:
        raise ValueError(f"token type {lo if lo < 0 else hi} is outside [0, {n_types - 1}] (the model's "
                         f"token_types={n_types}); pass 0 for sentence A, 1 for sentence B")
