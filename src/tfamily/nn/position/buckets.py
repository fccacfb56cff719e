"""T5's bucketed relative position bias (Raffel et al. 2020, section 2.1).

Each head learns one scalar per bucket of the signed distance j - i, added to the attention
score of query i and key j. Distances below ``num_buckets // 2`` (per side when both sides are
seen) get a bucket each; larger ones share logarithmically wider buckets up to ``max_distance``,
and every distance past it shares the last bucket. Bidirectional attention (the encoder) splits
the buckets between keys after the query and keys before it; causal attention (the decoder)
spends them all on the past. The bucketing follows Mesh TensorFlow's
``_relative_position_bucket`` exactly, so released checkpoints read the buckets they learned.

One table serves every layer of a stack (T5 computes the bias in the first layer and passes it
on): the builder makes one part per stack and hands it to each layer (the ``shared`` entry in
``POSITIONS``). T5 does not scale scores by 1/sqrt(d_head) either: that is ``heads.scale = 1.0``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...base.numbers import check_flag, check_int


def relative_buckets(rel: Tensor, *, causal: bool, num_buckets: int, max_distance: int) -> Tensor:
    """The bucket of each signed distance ``rel = j - i`` (key minus query), in [0, num_buckets)."""
    out = torch.zeros_like(rel)
    if not causal:
        num_buckets //= 2
        out = out + (rel > 0).long() * num_buckets  # keys after the query use the upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)  # a future key (masked anyway) shares bucket 0 with j = i
    exact = num_buckets // 2
    # Mesh TF: max_exact + log(d / max_exact) / log(max_distance / max_exact) * (buckets - max_exact)
    large = exact + (torch.log(dist.float() / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return out + torch.where(dist < exact, dist, large)


class BucketedRelative(nn.Module):
    """An ``AttentionPosition``: queries and keys pass unchanged; the bias is (1, h, n, m)."""

    def __init__(self, n_heads: int, causal: bool = False, *, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        check_flag("t5_relative causal", causal)
        self.causal = causal
        self.num_buckets = check_int("position.params.num_buckets", num_buckets, 4, hint="T5 uses 32")
        exact = num_buckets // (2 if causal else 4)  # distances with a bucket of their own (per side)
        self.max_distance = check_int("position.params.max_distance", max_distance, exact + 1,
                                      hint=f"T5 uses 128; it must exceed the {exact} exact distances")
        self.bias = nn.Embedding(num_buckets, n_heads)
        nn.init.normal_(self.bias.weight, std=0.02)  # small: training starts near content-only scores

    def forward(self, q: Tensor, k: Tensor, *, q_offset: int, k_offset: int,
                m: int) -> tuple[Tensor, Tensor, Tensor]:
        """Query i sits at ``q_offset + i`` (after a KV cache's keys), key j at j."""
        i = torch.arange(q.shape[-2], device=q.device)[:, None] + q_offset
        j = torch.arange(m, device=q.device)[None, :]
        buckets = relative_buckets(j - i, causal=self.causal, num_buckets=self.num_buckets,
                                   max_distance=self.max_distance)
        return q, k, self.bias(buckets).permute(2, 0, 1)[None].to(q.dtype)
