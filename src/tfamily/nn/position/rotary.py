"""Rotary position embedding (Su et al. 2021, RoFormer, eq. 34): an attention-stage position.

Each query and key is rotated by its absolute position: for the frequency theta_i =
base^(-2i/e), i < e/2, the pair (x_i, x_{i + e/2}) of position p becomes
(x_i cos(p theta_i) - x_{i+e/2} sin(p theta_i), x_i sin(p theta_i) + x_{i+e/2} cos(p theta_i)),
so q_m . k_n depends on m - n alone. The paper pairs neighbouring dimensions (2i, 2i+1); the
halves used here (GPT-NeoX's layout) are the same map up to a fixed permutation of each head's
dimensions, which the query and key projections absorb, and need no strided copies. No score
bias: the kernels keep their fast paths (SDPA's is_causal, the block-sparse kernels).
With a KV cache the new keys are rotated before they are appended, so a decode rotates each key
once; with Transformer-XL memory the memory's keys take the positions before the segment.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ...base.numbers import check_number


def tables(start: int, n: int, e: int, base: float, device, dtype) -> tuple[Tensor, Tensor]:
    """(cos, sin) of shape (n, e) for positions start..start+n-1: cos(p theta) on both halves,
    and sin(p theta) with the first half negated, so that rotate = x cos + swap(x) sin."""
    acc = torch.promote_types(dtype, torch.float32)
    inv = base ** (-torch.arange(0, e // 2, device=device, dtype=acc) * 2 / e)
    ang = torch.arange(start, start + n, device=device, dtype=acc)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    return torch.cat([cos, cos], -1).to(dtype), torch.cat([-sin, sin], -1).to(dtype)


def apply(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    e = x.shape[-1]
    return x * cos + torch.cat([x[..., e // 2:], x[..., :e // 2]], dim=-1) * sin


def rotate(x: Tensor, start: int, base: float) -> Tensor:
    """``x`` (..., n, e) at positions start..start+n-1 -> rotated (angles in fp32 at least)."""
    return apply(x, *tables(start, x.shape[-2], x.shape[-1], base, x.device, x.dtype))


class Rotary(nn.Module):
    citation = ("Su et al. 2021 (RoFormer), eq. 34: q and k rotated by position-dependent angles, so q_m . k_n depends "
                "on m - n only")

    def __init__(self, d_head: int, *, base: float = 10000.0):
        super().__init__()
        if isinstance(d_head, bool) or not isinstance(d_head, int) or d_head < 2 or d_head % 2:
            raise ValueError(f"rotary positions rotate pairs of dimensions: d_head must be even, got {d_head!r}; "
                             f"choose d_model and n_heads so that d_model / n_heads is even")
        check_number("rotary position base", base, 1.0, lo_open=True, hint="RoFormer: 10000")
        self.d_head, self.base = d_head, float(base)
        self._kept: tuple[tuple, tuple[Tensor, Tensor]] | None = None  # the last call's tables

    def _tables(self, start: int, n: int, x: Tensor) -> tuple[Tensor, Tensor]:
        # Training calls repeat one (start, n): the tables are computed once, not per call and
        # layer (a dozen small ops each; the demo's speed did not move measurably either way).
        # Plain attributes, never saved; inference mode is part of the key (its tensors stay in it).
        # Compiled, the tables are part of the graph (Dynamo cannot trace the inference-mode query).
        if torch.compiler.is_compiling():
            return tables(start, n, self.d_head, self.base, x.device, x.dtype)
        key = (start, n, x.device, x.dtype, torch.is_inference_mode_enabled())
        if self._kept is None or self._kept[0] != key:
            self._kept = (key, tables(start, n, self.d_head, self.base, x.device, x.dtype))
        return self._kept[1]

    def forward(self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int, m: int) -> tuple[Tensor, Tensor, None]:
        """``q`` (b, h, n, e) at positions q_offset.., ``k`` (b, h_kv, n_k, e): the newest ``n_k`` of
        the ``m`` keys, at positions m - n_k.. -> (rotated q, rotated k, no bias)."""
        if q.shape[-1] != self.d_head:
            raise ValueError(f"rotary position built for d_head {self.d_head} got heads of {q.shape[-1]}")
        n, n_k = q.shape[-2], k.shape[-2]
        if q_offset == m - n_k and n == n_k:  # queries and keys at the same positions (no memory)
            cos, sin = self._tables(q_offset, n, q)
            return apply(q, cos, sin), apply(k, cos, sin), None
        return rotate(q, q_offset, self.base), rotate(k, m - n_k, self.base), None
