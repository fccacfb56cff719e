"""The token side that ``LanguageModel`` and ``Classifier`` share: their parts registered in one
order, and the stack's input computed from token ids in one expression.

The order is part of the checkpoint format: it fixes ``parameters()`` (the optimiser's state) and
the order of ``state_dict`` keys, so both model kinds register through ``attach_parts``.
"""
from __future__ import annotations

from torch import Tensor, nn

from ..nn.depth import Depth
from ..nn.dropout import maybe_dropout
from ..nn.embedding import NoTokenTypes, TokenEmbedding


def attach_parts(model: nn.Module, embed: TokenEmbedding, position: nn.Module, stack: Depth, head: nn.Module,
                 objective: nn.Module, dropout: float, embed_norm: nn.Module | None,
                 types: nn.Module | None) -> None:
    """Register on ``model``: embed, position, stack, head, types, embed_norm, objective, drop."""
    model.embed, model.position, model.stack, model.head = embed, position, stack, head
    model.types = types if types is not None else NoTokenTypes()  # BERT's segments (nn/embedding/token_type.py)
    # BERT normalises the embedding sum before the first layer (Devlin et al. 2019's code).
    model.embed_norm = embed_norm if embed_norm is not None else nn.Identity()
    model.objective = objective
    model.drop = maybe_dropout(dropout)


def embed_tokens(model: nn.Module, tokens: Tensor, offset: int, token_types: Tensor | None) -> Tensor:
    """``tokens`` (b, n) -> the stack's input (b, n, d): embedding, positions from ``offset``,
    segment types, the embedding norm, dropout."""
    return model.drop(model.embed_norm(model.types(model.position(model.embed(tokens), offset), token_types)))
