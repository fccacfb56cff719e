"""BERT's masked language model (Devlin et al. 2019, section 3.1 and appendix A.1).

Per sequence, 15% of the positions that may be predicted are selected: the reference
implementation (``create_pretraining_data.py``) takes exactly ``max(1, round(0.15 n))`` of
the ``n`` candidate positions, uniformly at random, and so do we. Padding and special ids
(``special_ids``, and every id the objective reserves past the data's vocabulary) are never
candidates. Of the selected positions 80% become [MASK], 10% a random data token (never a
special one) and 10% stay unchanged, each position drawn independently; the loss is the
cross-entropy over exactly the selected positions, predicting the original tokens.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .lm import need, token_loss
from ..base.numbers import check_number


def selection_count(n: Tensor, mask_prob: float) -> Tensor:
    """How many of ``n`` candidate positions a row selects: ``max(1, round(p n))``, 0 when
    there are none (``torch.round`` rounds half to even, as Python's ``round`` in BERT's code)."""
    k = torch.round(n.to(torch.float64) * mask_prob).long().clamp_min(1)
    return torch.where(n > 0, torch.minimum(k, n), torch.zeros_like(k))


def select(candidates: Tensor, mask_prob: float, generator: torch.Generator | None = None) -> Tensor:
    """A (b, n) bool mask choosing ``selection_count`` of each row's candidates uniformly:
    the candidates with the k smallest uniform keys."""
    keys = torch.rand(candidates.shape, generator=generator, device=candidates.device)
    keys = keys.masked_fill(~candidates, 2.0)  # non-candidates sort last
    k = selection_count(candidates.sum(-1), mask_prob)
    ranks = keys.argsort(-1).argsort(-1)
    return (ranks < k[:, None]) & candidates


class MaskedLM(nn.Module):
    """Batch ``{"x": (b, n)[, "key_padding"]}``; ``key_padding`` is True at real tokens.

    By default [MASK] is its own id, ``vocab_size``, one past the data's ids: the objective
    asks the model for ``extra_tokens`` = 1 more embedding row, so a mask is never confused
    with a real token. An explicit ``mask_id`` must be a data id (and is then special).
    In evaluation the masks come from a generator seeded with ``eval_seed``, so every
    checkpoint is scored on the same corruption of the same text."""
    citation = "Devlin et al. 2019, section 3.1: 15% of tokens picked; 80% [MASK], 10% random, 10% kept"

    def __init__(self, vocab_size: int, mask_id: int | None = None, mask_prob: float = 0.15,
                 special_ids: list[int] | tuple[int, ...] = (), eval_seed: int = 0):
        super().__init__()
        self.vocab_size = vocab_size
        self.extra_tokens = 1 if mask_id is None else 0
        self.mask_id = vocab_size if mask_id is None else mask_id
        if isinstance(self.mask_id, bool) or not isinstance(self.mask_id, int) or (
                mask_id is not None and not 0 <= mask_id < vocab_size):
            raise ValueError(f"mask_id={self.mask_id!r} is outside the vocabulary [0, {vocab_size - 1}]; "
                             f"leave it unset for a reserved [MASK] id")
        check_number("mask_prob", mask_prob, 0.0, 1.0, lo_open=True, hi_open=True, hint="BERT: 0.15")
        if not isinstance(special_ids, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab_size for i in special_ids):
            raise ValueError(f"special_ids must be a list of data ids in [0, {vocab_size - 1}], got {special_ids!r}")
        self.mask_prob, self.eval_seed = float(mask_prob), eval_seed
        special = set(special_ids) | ({mask_id} if mask_id is not None else set())
        if len(special) >= vocab_size:
            raise ValueError(f"special_ids {sorted(special)} leave no data id to predict or draw; drop some")
        # Reserved ids past the data's vocabulary are special too. (Built from lists, not by
        # indexing: the tour builds models on the meta device, where nonzero cannot run.)
        rows = vocab_size + self.extra_tokens
        self.register_buffer("is_special", torch.tensor([i in special or i >= vocab_size for i in range(rows)]),
                             persistent=False)
        self.register_buffer("draw_ids", torch.tensor([i for i in range(vocab_size) if i not in special]),
                             persistent=False)

    def corrupt(self, x: Tensor, key_padding: Tensor | None = None,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``x`` (b, n) -> (corrupted copy, selected positions), both (b, n)."""
        if x.dim() != 2:
            raise ValueError(f"masked LM takes token ids of shape (batch, length), got {tuple(x.shape)}")
        if key_padding is not None and key_padding.shape != x.shape:
            raise ValueError(f"key_padding has shape {tuple(key_padding.shape)} but the tokens have "
                             f"{tuple(x.shape)}; pass one True (real) / False (padding) per token")
        candidates = ~self.is_special[x.clamp(0, len(self.is_special) - 1)]
        if key_padding is not None:
            candidates &= key_padding.bool()
        picked = select(candidates, self.mask_prob, generator)
        # Devlin et al. 2019, appendix A.1: 80% [MASK], 10% random, 10% unchanged.
        u = torch.rand(x.shape, generator=generator, device=x.device)
        rand = self.draw_ids[torch.randint(0, len(self.draw_ids), x.shape, generator=generator, device=x.device)]
        out = torch.where(picked & (u < 0.8), torch.full_like(x, self.mask_id), x)
        return torch.where(picked & (u >= 0.8) & (u < 0.9), rand.to(x.dtype), out), picked

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x")
        x, pad = batch["x"], batch.get("key_padding")
        gen = None if self.training else torch.Generator(device=x.device).manual_seed(self.eval_seed)
        corrupted, picked = self.corrupt(x, pad, gen)
        logits = model(corrupted, key_padding=pad)
        return token_loss(logits, x, picked)
