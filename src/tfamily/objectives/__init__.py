"""The objective axis: what is learned from a batch (``objective(model, batch) -> (loss, metrics)``).

Each objective registers in ``registry.OBJECTIVES`` (below) with the model kinds it trains; an objective that reserves ids past the data's vocabulary ([MASK], T5's
sentinels) declares how many with ``extra_tokens`` (``ReservesIds``).
"""
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

from ..registry import OBJECTIVES
from .alrfou import AuxiliaryLosses
from .classify import Classification
from .lm import CausalLM, Seq2Seq, token_loss
from .mlm import MaskedLM
from .span import SpanCorruption


class Objective(Protocol):
    """What a model's ``loss(batch)`` calls: the loss to minimise and the metrics to report
    (detached tensors or numbers, by name). The objective reads the batch's fields and runs the
    model's forward as it needs (a masked LM masks first, seq2seq feeds the decoder its shifted
    targets), so the trainer never looks inside a batch."""

    def __call__(self, model: nn.Module, batch: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]: ...


@runtime_checkable
class ReservesIds(Protocol):
    extra_tokens: int  # embedding rows past the data's vocabulary the model must add


# models: the model kinds an objective trains; the spec refuses other pairs.
OBJECTIVES.register("causal_lm", lambda: CausalLM(), models=("decoder",))
OBJECTIVES.register("masked_lm", MaskedLM, needs=("vocab_size",), models=("encoder",))
OBJECTIVES.register("seq2seq", lambda: Seq2Seq(), models=("encoder_decoder",))
OBJECTIVES.register("span_corruption", SpanCorruption, needs=("vocab_size",), models=("encoder_decoder",))
# Al-Rfou et al. 2019: causal LM plus per-layer classifiers, cut off as training progresses.
OBJECTIVES.register("al_rfou", AuxiliaryLosses, needs=("vocab_size", "d_model", "n_layers"), models=("decoder",))
OBJECTIVES.register("classification", Classification, models=("classifier", "dual_encoder"))

__all__ = ["OBJECTIVES", "Objective", "AuxiliaryLosses", "CausalLM", "Classification", "MaskedLM", "ReservesIds", "Seq2Seq", "SpanCorruption",
           "token_loss"]
