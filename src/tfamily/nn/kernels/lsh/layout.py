"""Hashing and the sorted layout of one LSH call (Kitaev et al. 2020, section 2).

Angular LSH: h(x) = argmax([xR; -xR]) for a random rotation R, a fresh R per round and head.
Each round sorts the positions by (bucket, position); a position's *slot* is its index in that
order. Which keys a query sees in a round is a range of slots, its *window* ``[lo, hi]``,
fixed here once per call and used by every path (chunked forward and backward, decoding rows,
and the dedup across rounds), so they cannot disagree.

The windows (``c`` = chunk length, ``S`` = the first slot of the query's chunk of ``c`` sorted
slots, ``s`` its own slot, ``[B, E]`` the slots of its bucket):

- paper (``same_bucket_only``), not causal: ``[max(B, S - c), min(E, S + c - 1)]``: the keys of
  its own bucket in its own chunk and the one before (eq. 3 with the chunking of section 2;
  no wrap-around from the first chunk to the last).
- paper, causal pattern: ``[max(B, s - c), s]``: the ``c`` latest earlier keys of its own bucket.
  The paper's chunks would let a query see back to ``S - c``, but ``S`` depends on how many
  positions, later ones included, fell in lower buckets, so a later token would move an earlier
  query's window. Within a bucket slots follow positions, so ``s - slot(j)`` is the difference
  of the two ranks within the bucket, which only earlier tokens decide: causal by construction.
  The paper's window always reaches ``s - c`` too, so this keeps its guaranteed look-back.
- peers (reformer-pytorch, Hugging Face): ``[max(0, S - c), S + c - 1]`` whatever the bucket
  (they also wrap the first chunk to the last; we do not).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

# Score elements per slice of work (32 MiB in fp32): bounds every temporary of the kernel.
SLICE_SCORES = 1 << 23


def lsh_buckets(x: Tensor, n_buckets: int, n_hashes: int) -> Tensor:
    """``(b, h, n, e) -> (b, h, n_hashes, n)`` angular LSH buckets, a fresh rotation per round
    and head drawn from torch's global generator. The argmax is taken slice by slice so the
    rotated vectors never all exist."""
    b, h, n, e = x.shape
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    rot = torch.randn(h, e, n_hashes, n_buckets // 2, device=x.device, dtype=dtype)
    out = torch.empty(b, h, n_hashes, n, dtype=torch.long, device=x.device)
    step = max(1, SLICE_SCORES // max(1, b * h * n_hashes * n_buckets // 2))
    for s in range(0, n, step):
        proj = torch.einsum("bhne,herk->bhrnk", x[:, :, s:s + step].to(dtype), rot)
        hi, lo = proj.max(-1), proj.min(-1)
        # argmax over [xR; -xR]: column j of -xR wins when its -min beats every max.
        out[..., s:s + step] = torch.where(hi.values >= -lo.values, hi.indices, lo.indices + n_buckets // 2)
    return out


@dataclass(frozen=True)
class Layout:
    """Per (batch, head, round) over the length padded to a multiple of ``chunk_len`` (Lp):
    ``perm`` the position at each slot, and per position its ``slot`` and window ``lo``/``hi``
    (int32, ``(b, h, R, Lp)``); ``valid`` ``(b, Lp)``: real, unpadded keys."""

    perm: Tensor
    slot: Tensor
    lo: Tensor
    hi: Tensor
    valid: Tensor
    chunk_len: int

    @property
    def n_rounds(self) -> int:
        return self.perm.shape[2]

    @property
    def padded_len(self) -> int:
        return self.perm.shape[3]


@torch.no_grad()
def make_layout(k: Tensor, key_padding: Tensor | None, n_buckets: int, n_hashes: int, chunk_len: int, *,
                causal: bool, same_bucket_only: bool) -> Layout:
    """Hash the keys (shared QK: a query's bucket is its key's) and fix every window. Padded
    keys and pad slots get bucket ``n_buckets`` so they sort last and never share a bucket
    with a real key."""
    b, h, n, _ = k.shape
    c = chunk_len
    lp = -(-n // c) * c
    buckets = lsh_buckets(k, n_buckets, n_hashes)
    valid = torch.ones(b, lp, dtype=torch.bool, device=k.device)
    valid[:, n:] = False
    if key_padding is not None:
        valid[:, :n] = key_padding
    buckets = F.pad(buckets, (0, lp - n), value=n_buckets).masked_fill(~valid[:, None, None, :], n_buckets)
    pos = torch.arange(lp, device=k.device)
    perm = torch.argsort(buckets * lp + pos, dim=-1)  # unique keys: a stable (bucket, position) sort
    slot = torch.empty_like(perm).scatter_(-1, perm, pos.expand_as(perm))
    start = slot - slot % c  # first slot of the position's chunk
    if same_bucket_only:
        counts = torch.zeros(*buckets.shape[:-1], n_buckets + 1, dtype=torch.long, device=k.device)
        counts.scatter_add_(-1, buckets, torch.ones_like(buckets))
        first = (counts.cumsum(-1) - counts).gather(-1, buckets)          # B: the bucket's first slot
        last = first + counts.gather(-1, buckets) - 1                     # E: its last slot
        lo = torch.maximum(first, slot - c if causal else start - c)
        hi = slot if causal else torch.minimum(last, start + c - 1)
    else:
        lo, hi = (start - c).clamp_min(0), start + c - 1
    i32 = torch.int32
    return Layout(perm, slot.to(i32), lo.to(i32), hi.to(i32), valid, c)


def in_window(kslot: Tensor, lo: Tensor, hi: Tensor, inside: bool = True) -> Tensor:
    """Keys' slots ``(..., w)`` against queries' windows ``(..., c)`` -> ``(..., c, w)`` bool (or
    its negation with ``inside=False``). One subtraction: |2 slot - (lo + hi)| <= hi - lo."""
    d = (2 * kslot)[..., None, :] - (lo + hi)[..., :, None]
    width = (hi - lo)[..., :, None]
    return d.abs_() <= width if inside else d.abs_() > width


def first_sighting(kslots: Tensor, los: Tensor, his: Tensor, r: int, current: Tensor | None = None) -> Tensor:
    """Kitaev et al. 2020, appendix A: with several rounds a key found in several of them must
    count once. The paper lowers its score by the log of that count in every round; equivalently
    (and with no counts to keep) a round attends only the keys that no earlier round's window
    holds, so the rounds' windows partition the union. ``kslots`` ``(R, ..., w)`` the window
    keys' slots in every round, ``los``/``his`` ``(R, ..., c)`` the queries' windows ->
    ``(..., c, w)``: in round ``r``'s window and in none before. ``current``: round ``r``'s test,
    when the caller has it cheaper (the chunked path: its window slots are consecutive)."""
    ok = in_window(kslots[r], los[r], his[r]) if current is None else current
    for prev in range(r):
        ok &= in_window(kslots[prev], los[prev], his[prev], inside=False)
    return ok
