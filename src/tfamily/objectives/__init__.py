"""The objective axis: what is learned from a batch (``objective(model, batch) -> (loss, metrics)``).

Each objective registers in ``registry.OBJECTIVES`` (in ``build.py``) with the model kinds
it trains; an objective that reserves ids past the data's vocabulary ([MASK], T5's
sentinels) declares how many with ``extra_tokens`` (``ReservesIds``).
"""
from typing import Protocol, runtime_checkable

from ..registry import OBJECTIVES
from .alrfou import AuxiliaryLosses
from .lm import CausalLM, Seq2Seq, token_loss
from .mlm import MaskedLM
from .span import SpanCorruption


@runtime_checkable
class ReservesIds(Protocol):
    extra_tokens: int  # embedding rows past the data's vocabulary the model must add


__all__ = ["OBJECTIVES", "AuxiliaryLosses", "CausalLM", "MaskedLM", "ReservesIds", "Seq2Seq", "SpanCorruption",
           "token_loss"]
