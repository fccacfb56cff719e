"""Embedding and output head: the token table (``token``) and the pre-softmax projection,
tied to the table or not (``head``); ``head``'s docstring gives the measured reason for the
tied head's learned logit scale."""
from .head import LMHead
from .token import TokenEmbedding, check_tokens

__all__ = ["TokenEmbedding", "LMHead", "check_tokens"]
