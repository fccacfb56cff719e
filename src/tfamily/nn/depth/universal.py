"""Universal Transformer depth (Dehghani et al. 2019): one shared block applied recurrently.

Section 2.1: H^t = Transition(A^t) with A^t = LayerNorm((H^{t-1} + P^t) + MultiHeadSelfAttention(
H^{t-1} + P^t)); the residual layout and the transition (feed-forward or separable convolution)
live in the block that is passed in. P^t is the coordinate signal (``position.Coordinate``),
added before every step. Each step attends to the keys and values of the same step, so a
KV-cached decode keeps one ``LayerState`` per step: ``len()`` is the number of steps.

``Universal`` runs a fixed number of steps. ``UniversalACT`` adds per-position dynamic halting
(section 2.2) with tensor2tensor's semantics (``universal_transformer_util``), which differ
from Graves' ACT (``act.py``):
- the halting unit p = sigmoid(dense(state)) (bias 1) reads the step's *input* state, after
  the coordinate signal, before the block;
- with threshold 1 - eps, a running position halts now when h + p > threshold and keeps
  running when h + p <= threshold (strict, unlike Graves' >=); the update weight is p while
  running, the remainder 1 - h when halting now, 0 once halted;
- the output accumulator starts at zeros and takes ``transformed * w + previous * (1 - w)``;
  the next step's input is the raw transformed state of *every* position, so halted
  positions are still transformed and still serve as keys and values, only with weight 0;
- the loop ends when every position has halted or at ``max_steps``; at the cap t2t adds no
  remainder, so a position's weights sum to at most 1 - eps there (Graves gives it R);
- ponder loss = weight * mean over batch and real positions of (n_updates + remainders),
  with no gradient through n_updates; ``aux_loss()`` returns it (``models.hooks.AuxLoss``).
t2t marks a halted position by h >= 1.0 after adding the remainder; we keep a boolean mask,
the same decision without depending on h + (1 - h) rounding to exactly 1.
Padded positions (``key_padding`` False) start halted: they never keep the loop running and
do not count in the ponder loss. With a KV cache every step runs (a later token may ponder
longer than the cached ones and needs their keys at every step); halted positions have
weight 0, so the output equals recomputation.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..position.coordinate import Coordinate
from ..state import LayerState
from ..tracing import recording
from ...base.numbers import check_int, check_number
from ...registry import DEPTHS


def _offset(state: Sequence[LayerState] | None) -> int | Tensor:
    """Absolute position of the first new token: the cached length before this call (per row,
    (b,), when the cache holds left-padded rows: ``KVCache.start``)."""
    cache = state[0].cache if state else None
    return 0 if cache is None else cache.start


def _check_state(state: Sequence[LayerState] | None, n_steps: int) -> None:
    if state is not None and len(state) != n_steps:
        raise ValueError(f"state has {len(state)} steps' caches but the Universal Transformer runs "
                         f"{n_steps} steps; make it with model.new_state()")


class Universal(nn.Module):
    citation = "Dehghani et al. 2019, section 2.1: one shared block applied recurrently, H^t = Transition(A^t)"

    def __init__(self, block: nn.Module, coordinate: nn.Module, n_steps: int,
                 final_norm: nn.Module | None = None):
        super().__init__()
        check_int("Universal Transformer n_steps", n_steps, 1)
        self.block, self.coordinate, self.n_steps = block, coordinate, n_steps
        self.final_norm = final_norm if final_norm is not None else nn.Identity()
        self.steps_executed = 0

    def __len__(self) -> int:
        return self.n_steps

    def forward(self, x: Tensor, *, state: Sequence[LayerState] | None = None,
                offset: int | Tensor | None = None, **kw) -> Tensor:
        """``x``: (b, n, d); ``state``: one LayerState per step or None; ``offset``: the position
        of the first token for the coordinate signal, an int or (b,) row offsets (None: the
        cached length); ``kw`` go to the block (key_padding, context, context_padding)."""
        _check_state(state, self.n_steps)
        offset = _offset(state) if offset is None else offset
        for t in range(self.n_steps):
            x = self.block(self.coordinate(x, t + 1, offset), state=None if state is None else state[t], **kw)
        self.steps_executed = self.n_steps
        return self.final_norm(x)


class HaltingUnit(nn.Module):
    """p = sigmoid(W s + b) per position, b initialised to 1 (t2t's act_halting_bias_init)."""

    def __init__(self, d_model: int, bias: float = 1.0):
        super().__init__()
        self.linear = nn.Linear(d_model, 1)
        nn.init.constant_(self.linear.bias, bias)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: (b, n, d) -> (b, n) halting probabilities."""
        return torch.sigmoid(self.linear(x)).squeeze(-1)


def check_act(max_steps: int, eps: float, ponder_weight: float) -> None:
    """Refuse halting settings that cannot work, naming the value (also run on specs)."""
    check_int("Universal Transformer ACT max_steps", max_steps, 1)
    check_number("ACT eps", eps, 0.0, 1.0, lo_open=True, hi_open=True, hint="Graves: 0.01")
    check_number("ponder_weight (t2t's act_loss_weight)", ponder_weight, 0.0)


class UniversalACT(nn.Module):
    citation = "Dehghani et al. 2019, section 2.2: per-position dynamic halting (ACT, Graves 2016) with a ponder loss"

    def __init__(self, block: nn.Module, coordinate: nn.Module, halting: nn.Module, max_steps: int, *,
                 eps: float = 0.01, ponder_weight: float = 0.01, final_norm: nn.Module | None = None):
        super().__init__()
        check_act(max_steps, eps, ponder_weight)
        self.block, self.coordinate, self.halting = block, coordinate, halting
        self.max_steps, self.eps, self.ponder_weight = max_steps, eps, ponder_weight
        self.final_norm = final_norm if final_norm is not None else nn.Identity()
        self.steps_executed = 0
        self.n_updates: Tensor | None = None  # (b, n) of the last call, for ponder plots
        self.remainders: Tensor | None = None
        self._ponder: Tensor | None = None

    def __len__(self) -> int:
        return self.max_steps

    def forward(self, x: Tensor, *, state: Sequence[LayerState] | None = None,
                key_padding: Tensor | None = None, offset: int | Tensor | None = None, **kw) -> Tensor:
        """``x``: (b, n, d) -> the halting-weighted accumulator (b, n, d), final-normed;
        ``offset`` as in ``Universal``."""
        _check_state(state, self.max_steps)
        offset, thr = (_offset(state) if offset is None else offset), 1.0 - self.eps
        b, n, _ = x.shape
        real = key_padding if key_padding is not None else torch.ones(b, n, dtype=torch.bool, device=x.device)
        halted = ~real
        h = x.new_zeros(b, n)  # cumulative halting probability
        remainders, n_updates = x.new_zeros(b, n), x.new_zeros(b, n)
        acc = torch.zeros_like(x)
        steps = 0
        for t in range(self.max_steps):
            # Once every position halted, later steps change nothing (their weights are 0): stop
            # early, except in a recorded graph, which cannot branch on a value and runs them all.
            if state is None and not recording() and bool(halted.all()):
                break
            x = self.coordinate(x, t + 1, offset)
            p = self.halting(x)
            running = (~halted).to(x.dtype)
            reached = h + p * running
            new_halted = (reached > thr).to(x.dtype) * running
            running = (reached <= thr).to(x.dtype) * running
            h = h + p * running
            remainders = remainders + new_halted * (1.0 - h)
            h = h + new_halted * remainders
            n_updates = n_updates + running + new_halted
            w = (p * running + new_halted * remainders)[..., None]
            x = self.block(x, state=None if state is None else state[t], key_padding=key_padding, **kw)
            acc = x * w + acc * (1.0 - w)
            halted = halted | new_halted.bool()
            steps += 1
        self.steps_executed = steps
        self.n_updates, self.remainders = n_updates.detach(), remainders.detach()
        count = real.sum().clamp(min=1)
        self._ponder = self.ponder_weight * ((n_updates + remainders) * real).sum() / count
        return self.final_norm(acc)

    def aux_loss(self) -> Tensor:
        """The last call's weighted ponder cost (zero before any call)."""
        if self._ponder is None:
            return torch.zeros((), device=self.halting_device())
        return self._ponder

    def halting_device(self) -> torch.device:
        return next(self.halting.parameters(), torch.zeros(())).device


_NEEDS = ("blocks", "n_layers", "final_norm", "d_model")


def universal(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None,
              d_model: int) -> Universal:
    # Dehghani et al. 2019: one block shared by all T = n_layers recurrent steps, the
    # coordinate signal (eq. 6-7) added before each.
    return Universal(blocks(0), Coordinate(d_model), n_layers, final_norm)


def universal_act(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, d_model: int,
                  eps: float = 0.01, ponder_weight: float = 0.01, halting_bias: float = 1.0) -> UniversalACT:
    # Dehghani et al. 2019, section 2.2 with tensor2tensor's halting: n_layers is max_steps.
    return UniversalACT(blocks(0), Coordinate(d_model), HaltingUnit(d_model, halting_bias), n_layers,
                        eps=eps, ponder_weight=ponder_weight, final_norm=final_norm)


# shared: one block serves every step (no per-layer inputs for XL memory, nothing to checkpoint per layer)
DEPTHS.register("universal", universal, needs=_NEEDS, shared=True)
DEPTHS.register("universal_act", universal_act, needs=_NEEDS, shared=True,
                traced_as="ACT runs every one of its steps (halted positions weigh 0, so outputs are the same)")
