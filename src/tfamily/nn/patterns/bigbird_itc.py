"""BigBird-ITC as Hugging Face's ``BigBirdForMaskedLM`` computes it in eval mode
(``attention_type="block_sparse"``), so imported checkpoints give the peer's logits.

Zaheer et al. 2020, appendix D ("ITC"): the sequence is cut into blocks of ``block``
positions; the first and the last block are global (they see and are seen by every
key), every other query block sees its own block and one on each side, and ``n_random``
random key blocks. Two things in the peer's eval mode are reproduced here, because they
are what a pretrained checkpoint computes when it is run for inference:

- the random block table is all zeros outside training, so each of the ``n_random``
  random blocks of a non-global query is block 0, which it already sees as a global
  block: block 0 enters that query's softmax ``1 + n_random`` times (a log-weight of
  log(1 + n_random) on its keys). Here those copies are prepended to the keys
  (``soften``), so any kernel computes the same sum;
- an input of at most ``(5 + 2 * n_random) * block`` tokens falls back to full
  attention. The peer pads longer inputs to a multiple of ``block``; its last block is
  the padded sequence's, so a real token in it is a global query.

Which block is last depends on the length: ``at_length(m)`` (called by the attention
for its m keys) fixes it. Further training keeps this layout (no random blocks); the
hashed random blocks of the paper's training live in ``bigbird``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import check_int, tile_range


@dataclass(frozen=True)
class BigBirdITC:
    block: int = 64
    n_random: int = 3
    length: int | None = None
    name: str = "bigbird_itc"
    causal: bool = False

    def __post_init__(self):
        check_int(self.name, "block", self.block)
        check_int(self.name, "n_random", self.n_random, lo=0)
        if self.length is not None:
            check_int(self.name, "length", self.length)

    def at_length(self, m: int) -> BigBirdITC:
        return self if m == self.length else replace(self, length=m)

    @property
    def sparse(self) -> bool:
        """False when the peer falls back to full attention (and for an unresolved length)."""
        return self.length is not None and self.length > (5 + 2 * self.n_random) * self.block

    @property
    def copies(self) -> int:
        """How many keys the prepended copies of block 0 add."""
        return self.n_random * self.block if self.sparse else 0

    def soften(self, q: Tensor, k: Tensor, v: Tensor, *, q_offset: int, key_padding: Tensor | None,
               bias: Tensor | None) -> tuple:
        """Prepend ``n_random`` copies of block 0's keys and values; positions shift by as many."""
        if not self.copies:
            return k, v, q_offset, key_padding, bias
        if k.shape[-2] != self.length:
            raise ValueError(f"{self.name}: resolved for {self.length} keys but got {k.shape[-2]}; "
                             f"call at_length with the key count")
        r, b = self.n_random, self.block
        k, v = (torch.cat([t[..., :b, :]] * r + [t], -2) for t in (k, v))
        if key_padding is not None:
            key_padding = torch.cat([key_padding[..., :b]] * r + [key_padding], -1)
        if bias is not None and bias.shape[-1] > 1:
            bias = torch.cat([bias[..., :b]] * r + [bias], -1)
        return k, v, q_offset + self.copies, key_padding, bias

    def memory_needed(self) -> int:
        return 1 << 62  # the global blocks see every key: keep all the memory there is

    def _last(self) -> int:
        return -(-self.length // self.block) - 1  # the padded sequence's last block

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if not self.sparse:
            return torch.ones_like(q_idx - kv_idx, dtype=torch.bool)
        qb = torch.div(q_idx - self.copies, self.block, rounding_mode="floor")
        kb = torch.div(kv_idx - self.copies, self.block, rounding_mode="floor")
        last = self._last()
        glob_q = (qb == 0) | (qb == last)
        seen = glob_q | ((kb - qb).abs() <= 1) | (kb == 0) | (kb == last)
        return torch.where(kv_idx < self.copies, ~glob_q, seen)

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        if not self.sparse:
            return torch.ones(1, qpos.shape[0], kpos.shape[0], dtype=torch.bool, device=qpos.device)
        c, blk = self.copies, self.block
        qb_lo, qb_hi = (torch.div(t - c, blk, rounding_mode="floor") for t in (q_lo, q_hi))
        kb_lo, kb_hi = (torch.div(t - c, blk, rounding_mode="floor") for t in (k_lo, k_hi))
        last = self._last()
        rows = ((qb_lo <= 0) | (qb_hi >= last))[:, None]
        cols = ((k_lo < c) | (kb_lo <= 0) | (kb_hi >= last))[None, :]
        near = (kb_hi[None, :] >= qb_lo[:, None] - 1) & (kb_lo[None, :] <= qb_hi[:, None] + 1)
        return (rows | cols | near)[None]
