"""Embedding and output head: the token table (``token``), token types (``token_type``: BERT's
sentence A / B rows) and the pre-softmax projection, tied to the table or not (``head``);
``head``'s docstring gives the measured reason for the tied head's learned logit scale."""
from .head import LMHead
from .token import TokenEmbedding, check_tokens
from .token_type import NoTokenTypes, TokenTypes

__all__ = ["TokenEmbedding", "LMHead", "check_tokens", "TokenTypes", "NoTokenTypes"]
