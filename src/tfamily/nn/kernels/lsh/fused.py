"""The compiled path of the whole-sequence LSH kernel (``csrc/lsh_chunks.cpp``).

The same function as ``chunks.LSHFunction`` (tested equal in outputs and gradients): one
(row, sorted chunk) tile at a time, gathered, scored, masked and normalised in cache, rounds
merged by log-sum-exp, and a backward that recomputes the scores from the saved log-sum-exp.
It serves calls the C++ knows how to mask: the full or the causal pattern, no additive bias,
float32 or float64 on the CPU; the others keep the PyTorch path. Attention dropout draws its
masks from a hash of (seed, row, round, query, key) (the seed from torch's generator, as the
PyTorch path's), so the masks differ from that path's but follow the same law.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ...patterns import Causal, Full, Pattern
from .. import native
from .chunks import KEEP_PROBS
from .layout import Layout


def usable(q: Tensor, pattern: Pattern, bias):
    """The compiled ops when they can serve this call, else None."""
    if (q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64) or bias is not None
            or type(pattern) not in (Full, Causal)):
        return None
    return native.ops()


def tile_rows(chunk_len: int, causal_windows: bool) -> int:
    """Query slots per tile. A tile's keys are the ``chunk_len`` slots before it and its own, so
    half-chunk tiles score 1.5 c keys per query instead of 2 c (25% fewer products): possible
    when every window ends at its own query (causal, own bucket only: ``[max(B, s - c), s]``);
    the other windows reach the end of the paper's chunk and need whole-chunk tiles."""
    return chunk_len // 2 if causal_windows and chunk_len % 2 == 0 and chunk_len >= 16 else chunk_len


class FusedLSHFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, lay: Layout, pattern: Pattern, scale: float, causal_windows: bool,
                dropout_p: float, ops):
        b, h, lp, e = q.shape
        c = lay.chunk_len
        cq = tile_rows(c, causal_windows)
        seed = int(torch.randint(0, 2 ** 62, ()).item()) if dropout_p > 0 else 0
        args = _layout_args(lay, h) + (bool(pattern.causal), float(scale), c, cq, float(dropout_p), seed)
        # As chunks.py: keep every round's tile probabilities for the backward when they fit.
        keep = lay.n_rounds * b * h * lp * min(c + cq, lp) <= KEEP_PROBS
        qf, kf, vf = (t.reshape(b * h, lp, e).contiguous() for t in (q, k, v))
        # The compiled forward applies the self rule too (a row with no other key outputs its value).
        out, lse, probs, lse_rounds = ops.lsh_forward(qf, kf, vf, *args, keep)
        ctx.save_for_backward(qf, kf, vf, out, lse, probs, lse_rounds)
        ctx.args, ctx.ops = args, ops
        return out.view(b, h, lp, e)

    @staticmethod
    def backward(ctx, dout):
        qf, kf, vf, out, lse, probs, lse_rounds = ctx.saved_tensors
        do = dout.reshape(qf.shape).contiguous()
        dq, dk, dv = ctx.ops.lsh_backward(qf, kf, vf, *ctx.args, lse, probs, lse_rounds, do, out)
        shape = dout.shape
        return dq.view(shape), dk.view(shape), dv.view(shape), None, None, None, None, None, None


def _layout_args(lay: Layout, h: int) -> tuple:
    b, _, r, lp = lay.perm.shape
    flat = lambda t: t.reshape(b * h, r, lp).contiguous()  # noqa: E731
    valid = lay.valid.to(torch.uint8).repeat_interleave(h, dim=0)
    return flat(lay.perm), flat(lay.slot), flat(lay.lo), flat(lay.hi), valid
