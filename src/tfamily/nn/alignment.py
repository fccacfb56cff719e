"""Alignment scores of attention in recurrent encoder-decoders.

A score compares a decoder state (the query: Luong et al. 2015 use the current state h_t,
Bahdanau et al. 2015 the previous state s_{i-1}) with every encoder state h_s:

- dot        h_t^T h_s                                (Luong et al. 2015, eq. 8)
- general    h_t^T W_a h_s                            (Luong et al. 2015, eq. 8)
- concat     v_a^T tanh(W_a [h_t; h_s])               (Luong et al. 2015, eq. 8)
- additive   v_a^T tanh(W_a s_{i-1} + U_a h_j)        (Bahdanau et al. 2015, eq. 6 and A.1.2)
- scaled_dot h_t^T h_s / sqrt(d)                      (Vaswani et al. 2017, eq. 1)

Concat and additive are the same function: W_a [h_t; h_s] = W_q h_t + W_k h_s with W_a = [W_q W_k];
the two papers differ in which state scores and where the context goes (models/rnn_decoders.py).
Each score splits into ``keys(memory)``, the part that depends on the source only (W_a h_s,
U_a h_j), computed once per source, and ``forward(query, keys)`` per decoder step.
``attend`` turns scores into weights (softmax over source positions, padding exactly 0)
and the context vector c = sum_s a_s h_s.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..registry import ALIGNMENTS


class Dot(nn.Module):
    citation = "Luong et al. 2015, eq. 8: score = h_t^T h_s"

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        if d_query != d_key:
            raise ValueError(f"alignment 'dot' needs decoder and encoder states of one size, got {d_query} and "
                             f"{d_key} (a bidirectional encoder doubles it); use 'general' or 'concat'")

    def keys(self, memory: Tensor) -> Tensor:
        return memory

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """``query`` (b, n, d), ``keys`` (b, m, d) -> scores (b, n, m)."""
        return query @ keys.transpose(1, 2)


class ScaledDot(Dot):
    citation = "Vaswani et al. 2017, eq. 1: score = h_t^T h_s / sqrt(d)"

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return query @ keys.transpose(1, 2) / math.sqrt(query.shape[-1])


class General(nn.Module):
    citation = "Luong et al. 2015, eq. 8: score = h_t^T W_a h_s"

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.w_a = nn.Linear(d_key, d_query, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.w_a(memory)  # W_a h_s, once per source

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return query @ keys.transpose(1, 2)


class Concat(nn.Module):
    """v_a^T tanh(W_q q + W_k h_s): Luong's concat and Bahdanau's additive score (the hidden
    size of the tanh layer is ``d_query``, Bahdanau's n' = n)."""
    citation = "Luong et al. 2015, eq. 8 (concat) = Bahdanau et al. 2015, eq. 6 (additive): v_a^T tanh(W_a s + U_a h_j)"

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.w_q = nn.Linear(d_query, d_query, bias=False)
        self.w_k = nn.Linear(d_key, d_query, bias=False)
        self.v_a = nn.Linear(d_query, 1, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.w_k(memory)  # U_a h_j: Bahdanau, A.1.2, "can be pre-computed"

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.v_a(torch.tanh(self.w_q(query)[:, :, None] + keys[:, None])).squeeze(-1)


def attend(scores: Tensor, values: Tensor, padding: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``scores`` (b, n, m), ``values`` (b, m, e), ``padding`` (b, m) True on real source tokens ->
    (context (b, n, e), weights (b, n, m)). Padded positions get weight exactly 0 (exp(-inf))."""
    if padding is not None:
        if not bool(padding.any(-1).all()):
            raise ValueError("a source row has no real token (src_padding all False): nothing to attend to")
        scores = scores.masked_fill(~padding[:, None, :], float("-inf"))
    # softmax in fp32 at least (bf16/fp16 scores would lose the small weights), fp64 kept as fp64
    weights = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(-1).to(values.dtype)
    return weights @ values, weights


ALIGNMENTS.register("dot", Dot, needs=("d_query", "d_key"))
ALIGNMENTS.register("scaled_dot", ScaledDot, needs=("d_query", "d_key"))
ALIGNMENTS.register("general", General, needs=("d_query", "d_key"))
ALIGNMENTS.register("concat", Concat, needs=("d_query", "d_key"))
ALIGNMENTS.register("additive", Concat, needs=("d_query", "d_key"))
