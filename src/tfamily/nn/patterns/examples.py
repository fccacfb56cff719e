"""One instance of every sparse pattern, sized for a sequence length.

Shared by the pictures (``tfamily patterns``), the attention benchmark and the
equivalence tests, so all three exercise the same catalogue. Sizes follow the
papers where they depend on length: the Sparse Transformer's stride l ~ sqrt(L)
(Child et al. 2019, section 4.1), an image as wide as sqrt(L) for 2D local blocks;
windows and BigBird blocks are fixed widths capped at a fraction of L so cost
grows linearly in L.
"""
from __future__ import annotations

import math

from .basic import Causal
from .bigbird import RandomBlocks, bigbird, longformer
from .combine import Intersect, PerHead, Union
from .factorized import FixedBlock, FixedSummary, StridedColumns, fixed, strided
from .local import GlobalTokens, Local1D, Local2D, SlidingWindow


def image_width(seq_len: int) -> int:
    """A power of two near sqrt(L): the width of the image a 2D local pattern assumes."""
    return max(4, 2 ** round(math.log2(math.sqrt(seq_len))))


def examples(seq_len: int, *, toys: bool = False) -> dict:
    """name -> pattern for a sequence of ``seq_len``; ``toys`` adds small compositions
    (intersection, mixed per-head) that only tests need."""
    L = seq_len
    w = max(2, min(256, L // 8))
    stride = max(2, round(math.sqrt(L)))
    block = max(4, 2 ** round(math.log2(math.sqrt(L))))          # fixed pattern's l
    width = image_width(L)
    bw, bh = max(2, width // 4), max(1, width // 8)                # 2D query block
    out = {
        "causal": Causal(),
        "sliding_window": SlidingWindow(w),
        "sliding_window_2sided": SlidingWindow(w // 2 + 1, causal=False),
        "longformer": longformer(w, n_global=max(1, min(16, L // 32))),
        "bigbird": bigbird(block=max(4, min(64, L // 16))),
        "local_1d": Local1D(block=w, memory=w),
        "local_2d": Local2D(width, block_h=bh, block_w=bw, memory_h=2 * bh, memory_w=bw // 2),
        "strided_heads": strided(stride, "heads"),
        "strided_merged": strided(stride, "merged"),
        "fixed_heads": fixed(block, max(1, block // 4), combine="heads"),
        "fixed_merged": fixed(block, max(1, block // 4), combine="merged"),
    }
    if toys:
        c = max(1, block // 4)
        out.update({
            "strided_columns": StridedColumns(stride),
            "fixed_block": FixedBlock(block),
            "fixed_summary_offsets": FixedSummary(block, c, offsets=tuple(range(min(3, block // c)))),
            "dilated_window": SlidingWindow(max(2, w // 4), dilation=3),
            "longformer_dilated": longformer(max(2, w // 4), n_global=2, dilation=2),
            "global_2sided": GlobalTokens(3, causal=False),
            "random_blocks": RandomBlocks(2, max(2, block // 2), seed=3),
            "bigbird_2sided": bigbird(block=max(4, block // 2), n_random=2, causal=False,
                                      n_blocks=-(-L // max(4, block // 2))),
            "intersect": Intersect(SlidingWindow(2 * w), StridedColumns(3)),
            "mixed_heads": PerHead([Union(SlidingWindow(w), StridedColumns(stride)), Local1D(w, 2),
                                    bigbird(block=max(4, block // 2))]),
        })
    return out
