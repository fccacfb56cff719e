"""Training FLOPs of an arena cell: one counting rule for every member.

A training step costs three forward passes (the backward pass is two: the gradients with respect
to activations and to weights; Kaplan et al. 2020, section 2.1), counted on one training batch at
the cell's shape. A forward pass is counted in two parts:

* every matrix product outside attention (projections, feed-forward, the classifier head, the
  language model's output layer): ``2 m n k`` per ``(m x k) @ (k x n)``, as torch's
  ``FlopCounterMode`` counts the operations that actually run. A weight applied several times (a
  weight-shared depth such as the Universal Transformer's, ACT's steps) is counted at every
  application: a recurrent member pays per step. Embedding look-ups, norms, activations, softmax
  and the loss are not counted;
* attention by the pairs it visits, not by what a kernel happens to compute: a (query, key) pair
  costs ``2 d_head`` for its score and ``2 d_head`` for its share of the weighted values, per head.
  A pattern is credited with exactly the pairs it allows (``pairs``: full attention n^2, causal
  n(n+1)/2, a sliding window, strided or BigBird pattern only its kept entries); padding counts as
  tokens, as it does in tokens/s. LSH attention (Kitaev et al. 2020) visits, per round, each
  query's sorted chunk and the one before (``2 c`` keys, c the chunk length) and pays for hashing:
  the random rotation (``2 d_head n_buckets / 2`` per key and round) and the sort (``log2 m``
  comparisons per key and round, each counted as one operation).

Recomputation is not credited: a reversible stack or gradient checkpointing re-runs forward work
in the backward pass to save memory, which shows up in tokens/s, not here. The count of a cell is
``3 x forward x steps``; ``--flops`` stops every cell when that product would pass the budget.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..nn.attention import Attention
from ..nn.kernels import LSHKernel

BACKWARD = 2  # backward pass = 2 forward passes: the rule's factor 3 = 1 + BACKWARD


def pairs(pattern, n: int, m: int | None = None, *, n_heads: int = 1, q_offset: int = 0, tile: int = 256) -> int:
    """The (query, key) pairs ``pattern`` allows for ``n`` queries at ``q_offset`` against ``m``
    keys (default n), summed over ``n_heads`` heads: counted exactly, ``tile`` query rows at a
    time, so nothing n x m is formed."""
    m = n if m is None else m
    b, h = torch.zeros((), dtype=torch.long), torch.arange(n_heads).view(-1, 1, 1)
    kv = torch.arange(m).view(1, 1, -1)
    kept = 0
    for q in torch.arange(q_offset, q_offset + n).split(tile):
        kept += int(pattern.mask_mod(b, h, q.view(1, -1, 1), kv).expand(n_heads, len(q), m).sum())
    return kept


def lsh_flops(kernel: LSHKernel, n: int, m: int, n_heads: int, d_head: int, d_value: int) -> int:
    """One batch row of LSH attention (module docstring): the chunk-window pairs of every round
    plus hashing and sorting the ``m`` keys."""
    rounds, window = kernel.n_hashes, min(2 * kernel.chunk_len, m)
    attend = rounds * n * window * 2 * (d_head + d_value)
    rotate = rounds * m * 2 * d_head * (kernel.buckets_for(m) // 2)
    sort = rounds * m * math.ceil(math.log2(max(m, 2)))
    return n_heads * (attend + rotate + sort)


class _Counting:
    """Stands in for an attention kernel while a forward pass is counted: adds the call's FLOPs
    by the rule to ``tally`` and returns zeros of the output's shape (the projections that follow
    cost the same whatever the values)."""

    def __init__(self, kernel, tally: list, cache: dict):
        self.kernel, self.tally, self.cache = kernel, tally, cache

    def __call__(self, q, k, v, *, pattern, q_offset: int = 0, **kw):
        b, h, n, e = q.shape
        m, ev = k.shape[-2], v.shape[-1]
        if isinstance(self.kernel, LSHKernel):
            self.tally[0] += b * lsh_flops(self.kernel, n, m, h, e, ev)
        else:
            key = (repr(pattern), n, m, q_offset, h)
            if key not in self.cache:
                self.cache[key] = pairs(pattern, n, m, n_heads=h, q_offset=q_offset)
            self.tally[0] += b * self.cache[key] * 2 * (e + ev)
        return q.new_zeros(b, h, n, ev), None


@contextlib.contextmanager
def _counting_kernels(model: torch.nn.Module, tally: list):
    attns = [a for a in model.modules() if isinstance(a, Attention)]
    kernels = [a.kernel for a in attns]
    cache: dict = {}
    try:
        for a in attns:
            a.kernel = _Counting(a.kernel, tally, cache)
        yield
    finally:
        for a, kern in zip(attns, kernels):
            a.kernel = kern


def forward_flops(model: torch.nn.Module, batch: dict) -> int:
    """The FLOPs of one forward pass of ``model.loss(batch)`` by the module's rule."""
    tally = [0]
    was_training = model.training
    model.eval()  # no dropout: the count is of the computation, not of one random mask
    try:
        with torch.no_grad(), _counting_kernels(model, tally), FlopCounterMode(display=False) as counter:
            model.loss(batch)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops()) + tally[0]


def step_flops(model: torch.nn.Module, batch: dict) -> int:
    """The FLOPs of one training step on ``batch``: forward plus a backward of ``BACKWARD`` forwards."""
    return (1 + BACKWARD) * forward_flops(model, batch)
