"""PyTorch's fused ``scaled_dot_product_attention`` (flash kernel on CPU and CUDA).

Grouped-query attention uses ``enable_gqa`` so K/V are broadcast, never copied
per query head. Causal attention over a square score matrix uses ``is_causal``
(the flash kernel then skips masked blocks); other patterns pass a dense boolean
mask, which is correct but L x L: sparse patterns have their own kernels.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..patterns import Causal, Full, Pattern
from . import fused_blocks
from .base import allowed_mask
from .tiled import min_block, sparse_attention

# CPU SDPA in bf16/fp16 over short key rows is slower than the same call in fp32: its low-precision
# flash kernel pays a fixed cost per (batch, head) block that the small products do not repay.
# Forward + backward, causal, one thread, alternating, Zen 5 EPYC (experiments/recipe/demo_bf16/
# attention.csv), bf16 time over fp32's: head dim 32: 64 keys 2.2x, 128 1.8x, 256 1.13x, 512 0.92x;
# head dim 64: 64 keys 1.55x, 128 1.22x, 192 0.90x. The crossover sits near keys x head dim = 8,192:
# up to there the call runs in fp32 (more precise too) and casts back.
CPU_HALF_UPCAST_MAX = 8192  # keys x head dim


class SDPAKernel:
    citation = "Vaswani et al. 2017, eq. 1, computed by the fused flash kernel (Dao et al. 2022)"

    name = "sdpa"
    per_query_padding = True  # key_padding may be (b, n, m): ``allowed_mask`` takes it

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern: Pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 dropout_p: float = 0.0, scale: float | None = None,
                 need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            raise ValueError("kernel 'sdpa' cannot return attention weights; "
                             "use kernel='reference' to inspect them")
        n, m = q.shape[-2], k.shape[-2]
        if (dropout_p > 0 and bias is None and q.device.type == "cpu" and isinstance(pattern, (Causal, Full))
                and not torch.compiler.is_compiling()):  # the compiled op and its planner are opaque to Dynamo
            out = _fused_dropout(q, k, v, pattern, q_offset, key_padding, dropout_p, scale)
            if out is not None:
                return out, None
        is_causal, mask = False, None
        # Full attention, or causal where every query already sits after every key (a decode step).
        unmasked = isinstance(pattern, Full) or (isinstance(pattern, Causal) and q_offset + 1 >= m)
        if isinstance(pattern, Causal) and q_offset == 0 and n == m and key_padding is None:
            is_causal = bias is None
            if bias is not None:
                mask = allowed_mask(pattern, q, k, q_offset, None)
        elif not (unmasked and key_padding is None):
            mask = allowed_mask(pattern, q, k, q_offset, key_padding)
        live = None
        if bias is not None:
            bias = bias.to(q.dtype)
            if mask is not None:
                # A finite fill keeps a fully masked row NaN-free; its output (an average) is
                # zeroed below, as the boolean-mask path and the reference kernel do.
                live = mask.any(-1, keepdim=True)
                mask = bias.masked_fill(~mask, torch.finfo(q.dtype).min)
            else:
                mask = bias
        dtype = q.dtype
        upcast = q.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) \
            and m * q.shape[-1] <= CPU_HALF_UPCAST_MAX
        if upcast:
            q, k, v = q.float(), k.float(), v.float()
            mask = mask.float() if mask is not None and mask.is_floating_point() else mask
        # Autocast would cast the upcast tensors straight back.
        with torch.autocast("cpu", enabled=False) if upcast else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=bool(k.shape[1] != q.shape[1])).to(dtype)
        return (out if live is None else out * live), None


def _fused_dropout(q: Tensor, k: Tensor, v: Tensor, pattern: Pattern, q_offset: int, key_padding: Tensor | None,
                   dropout_p: float, scale: float | None) -> Tensor | None:
    """Attention-probability dropout on CPU through the compiled block kernel, or None where it
    is not built. With ``dropout_p > 0`` CPU SDPA leaves its flash kernel for the math path,
    which holds L x L probabilities: forward + backward at b 4, h 4, L 1024, e 32 took 1,152 ms
    against 210 ms without dropout, and 158 ms here (one thread, alternating;
    ``experiments/recipe/notes.md``). The block kernel draws its masks tile by tile from a seed
    taken from torch's generator (``fused_blocks``), so runs stay reproducible."""
    if fused_blocks.usable(q) is None or q.shape[-2] < min_block("auto"):  # short rows: the math path is cheap
        return None
    ctx = dict(q_offset=q_offset, key_padding=key_padding, dropout_p=dropout_p, block="auto",
               scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return sparse_attention(q, k, v, pattern, tuple(range(q.shape[1])), None, ctx)
