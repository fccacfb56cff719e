"""The block-sparse kernel: a pattern's attention over the key tiles its plan lists
(``tiled.py``), full and causal attention through fused SDPA, and short rows, decode steps and
recorded graphs through one dense mask.
"""
from __future__ import annotations

import math

from torch import Tensor

from ...base.numbers import check_int
from ..patterns import Causal, Full, Pattern
from ..tracing import recording
from .sdpa import SDPAKernel
from .tiled import dense_attention, min_block, per_head_attention, sparse_attention, union_weights  # noqa: F401 (their public path)

_SDPA = SDPAKernel()


class BlockSparseKernel:
    """``block_size``: tile edge in positions, or ``"auto"`` to pick 64, 128 or 256 per
    (pattern, length) by modelled cost (nn/kernels/layout.py, ``plan_cost``)."""
    citation = "Child et al. 2019, section 5.5: block-sparse attention kernels"

    name = "blocksparse"

    def __init__(self, block_size: int | str = 128):
        self.block_size = check_block_size("blocksparse", block_size)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            raise ValueError("kernel 'blocksparse' cannot return attention weights; "
                             "use kernel='reference' to inspect them")
        if isinstance(pattern, (Full, Causal)):  # nothing to skip beyond what fused SDPA skips
            return _SDPA(q, k, v, pattern=pattern, q_offset=q_offset, key_padding=key_padding, bias=bias,
                         dropout_p=dropout_p, scale=scale)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        # Decode steps: an n x m mask is linear in m. While recording a graph (torch.export, ONNX,
        # TorchScript) too: the tile plan is Python over the example's length and its fast path a
        # custom op, so an exported sparse member computes its pattern as a dense mask.
        if recording() or q.shape[-2] < min_block(self.block_size):
            return dense_attention(q, k, v, pattern, q_offset, key_padding, bias, dropout_p, scale), None
        heads = tuple(range(q.shape[1]))
        ctx = dict(q_offset=q_offset, key_padding=key_padding, dropout_p=dropout_p, scale=scale,
                   block=self.block_size)
        return sparse_attention(q, k, v, pattern, heads, bias, ctx), None


def check_block_size(kernel: str, block_size):
    if block_size == "auto":
        return block_size
    return check_int(f"{kernel}: block_size", block_size, 1, hint="or 'auto'")
