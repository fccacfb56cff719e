"""BigBird (Zaheer et al. 2020, section 2): global tokens + sliding window + r random
blocks, and Longformer (Beltagy et al. 2020): sliding window + global tokens.

The random blocks are a deterministic hash of (seed, layer, head, query block), so
the layout is fixed per layer and head without storing a table, works for any
length, and is the same function in the dense reference and the block-sparse plan.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import check_int, tile_range
from .combine import Union
from .local import GlobalTokens, SlidingWindow

_MOD = 2 ** 31


def _scramble(x: Tensor) -> Tensor:
    # Two rounds of a 31-bit LCG with an xor-shift (values stay < 2**62 in int64).
    x = x % _MOD
    for _ in range(2):
        x = (x * 1103515245 + 12345) % _MOD
        x = x ^ torch.div(x, 65536, rounding_mode="floor")
    return x


@dataclass(frozen=True)
class RandomBlocks:
    """Each query block of ``block`` positions sees ``n_random`` random key blocks
    (section 2, "random attention", in the blocked form of appendix D).

    Causal: drawn among blocks 0..k for query block k. Non-causal needs ``n_blocks``,
    the number of key blocks to draw from (blocks past the sequence are simply absent).
    """
    citation = "Zaheer et al. 2020, section 2: r random keys per query (blocked form)"

    n_random: int = 3
    block: int = 64
    seed: int = 0
    layer: int = 0
    causal: bool = True
    n_blocks: int | None = None
    name: str = "random_blocks"
    per_head = True

    def __post_init__(self):
        check_int(self.name, "n_random", self.n_random)
        check_int(self.name, "block", self.block)
        check_int(self.name, "seed", self.seed, lo=0)
        check_int(self.name, "layer", self.layer, lo=0)
        if not self.causal:
            if self.n_blocks is None:
                raise ValueError(f"{self.name}: causal=False needs n_blocks (how many key blocks to "
                                 f"draw from, e.g. max_len // block), got n_blocks=None")
            check_int(self.name, "n_blocks", self.n_blocks)

    def choice(self, h: Tensor, qb: Tensor, t: int) -> Tensor:
        """The t-th random key block of query block ``qb`` in head ``h``."""
        h, qb = h.long(), qb.long()  # the hash needs 62-bit products
        x = _scramble(((self.seed * 1000003 + self.layer * 10007 + t * 613) % _MOD) + h * 7919 + qb * 104729)
        return x % (qb + 1) if self.causal else x % self.n_blocks

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        qb = torch.div(q_idx, self.block, rounding_mode="floor")
        kb = torch.div(kv_idx, self.block, rounding_mode="floor")
        hit = self.choice(h, qb, 0) == kb
        for t in range(1, self.n_random):
            hit = hit | (self.choice(h, qb, t) == kb)
        return hit & (kv_idx <= q_idx) if self.causal else hit

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        qb_lo = torch.div(q_lo, self.block, rounding_mode="floor")
        qb_hi = torch.div(q_hi, self.block, rounding_mode="floor")
        span = int((qb_hi - qb_lo).max()) + 1 if qpos.numel() else 1
        qbs = qb_lo[:, None] + torch.arange(span, device=qpos.device)      # (nq, S)
        live = qbs <= qb_hi[:, None]
        h = torch.as_tensor(list(heads), device=qpos.device).view(-1, 1, 1)
        starts = torch.stack([self.choice(h, qbs[None], t) for t in range(self.n_random)], -1)
        starts = (starts * self.block).flatten(2)                           # (H, nq, S * r)
        live = live[None, :, :, None].expand(-1, -1, -1, self.n_random).flatten(2)
        hit = ((starts[..., None] <= k_hi) & (starts[..., None] + self.block > k_lo)
               & live[..., None]).any(2)                                    # (H, nq, nk)
        return hit & (k_lo[None, :] <= q_hi[:, None])[None] if self.causal else hit


@dataclass(frozen=True)
class BlockWindow:
    """The blocked sliding window (section 2 and appendix D): query block k sees key blocks
    k - radius ... k + radius, so with radius 1 a window of 3 blocks, the query's own and
    one on each side. ``causal`` also drops keys after the query."""

    block: int = 64
    radius: int = 1
    causal: bool = False
    name: str = "block_window"

    def __post_init__(self):
        check_int(self.name, "block", self.block)
        check_int(self.name, "radius", self.radius, lo=0)

    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        qb = torch.div(q_idx, self.block, rounding_mode="floor")
        kb = torch.div(kv_idx, self.block, rounding_mode="floor")
        near = (kb - qb).abs() <= self.radius
        return near & (kv_idx <= q_idx) if self.causal else near

    def block_candidates(self, qpos: Tensor, kpos: Tensor, heads) -> Tensor:
        (q_lo, q_hi), (k_lo, k_hi) = tile_range(qpos), tile_range(kpos)
        first = (torch.div(q_lo, self.block, rounding_mode="floor") - self.radius) * self.block
        end = (torch.div(q_hi, self.block, rounding_mode="floor") + self.radius + 1) * self.block
        right = torch.minimum(end, q_hi + 1) if self.causal else end
        return ((k_hi[None, :] >= first[:, None]) & (k_lo[None, :] < right[:, None]))[None]


def bigbird(block: int = 64, window: int | None = None, n_global: int | None = None,
            n_random: int = 3, seed: int = 0, layer: int = 0, causal: bool = True,
            n_blocks: int | None = None) -> Union:
    """Global + window + random (section 2, eq. 2's graph). Defaults follow the paper's
    blocked layout: a window of 3 blocks and 2 global blocks.

    Two-sided (``causal=False``, the paper's encoder): the window is block-aligned, the
    query's block and (window / block - 1) / 2 blocks on each side, so ``window`` must be
    an odd multiple of ``block``. Causal: the ``window`` keys up to and including the query
    (a ``SlidingWindow``), as wide as the paper's window, all of it in the past."""
    window = 3 * block if window is None else window
    n_global = 2 * block if n_global is None else n_global
    check_int("bigbird", "window", window)
    if causal:
        local = SlidingWindow(window, causal=True)
    else:
        if window % block or (window // block) % 2 == 0:
            raise ValueError(f"bigbird: a two-sided window spans whole blocks, the query's and as many on "
                             f"each side: window must be an odd multiple of block={block}, got "
                             f"window={window}; e.g. window={3 * block}")
        local = BlockWindow(block, (window // block - 1) // 2)
    return Union(local, GlobalTokens(n_global, causal=causal),
                 RandomBlocks(n_random, block, seed, layer, causal, n_blocks), name="bigbird")


def longformer(window: int = 256, n_global: int = 1, dilation: int = 1, causal: bool = True) -> Union:
    """Sliding window (optionally dilated) + global tokens (Beltagy et al. 2020, section 3.1)."""
    return Union(SlidingWindow(window, causal=causal, dilation=dilation),
                 GlobalTokens(n_global, causal=causal), name="longformer")
