"""Tile sizes of the compiled block-sparse kernel against each other, alternated in one process:
fwd+bwd ms of one attention call (b 1, h 8, d_head 64) per pattern and block size, best and median
of ``--rounds`` rounds, beside the size ``block_size="auto"`` picks (``layout.ROW_COSTS``).

    PYTHONPATH=scripts python experiments/attention/blocksparse_block_ab.py [--seq-len 16384] [--threads 2] [--rounds 4]
        [--dtype float32|bfloat16] [--blocks 32 64 128] [--patterns strided_heads ...]

Prints one JSON line per pattern ({block: [best, median]}, the auto pick and its ms, each size's computed
scores and best time per thousand of them) and a list at the end.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from ab_common import add_common_args, fwd_bwd_ms, inputs
from tfamily.nn.kernels import BlockSparseKernel, layout
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    add_common_args(p)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--blocks", nargs="+", type=int, default=[32, 64, 128])
    p.add_argument("--patterns", nargs="+", default=["strided_heads", "strided_merged", "fixed_heads"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L, dtype = args.seq_len, getattr(torch, args.dtype)
    catalogue = examples(L)
    q, k, v, grad = inputs(L, dtype)
    sizes = [*args.blocks, "auto"]
    kernels = {b: BlockSparseKernel(b) for b in sizes}
    rows = []
    for name in args.patterns:
        pattern = catalogue[name]

        def call(b):
            return fwd_bwd_ms(kernels[b], pattern, q, k, v, grad)

        layout._BEST.clear()
        layout.PLANS.clear()
        scores = {}
        for b in sizes:
            call(b)  # plans and warm-up
            if b != "auto":  # computed scores of the plans this size ran (before auto discards its losers)
                scores[b] = sum(sum(bk.scores for bk in plan.buckets)
                                for key, plan in layout.PLANS._plans.items() if key[2] == L and key[5] == b)
        picked = sorted({blk for key, blk in layout._BEST.items() if key[2] == L})
        times = {b: [] for b in sizes}
        for _ in range(args.rounds):
            for b in sizes:
                times[b].append(call(b))
        row = dict(pattern=name, seq_len=L, threads=args.threads, dtype=args.dtype, auto_picks=picked,
                   ms={str(b): [round(min(t), 1), round(statistics.median(t), 1)] for b, t in times.items()},
                   scores={str(b): n for b, n in scores.items()},
                   # best us per thousand computed scores: the cost per score of each tile size
                   us_per_kscore={str(b): round(min(times[b]) * 1e3 / (n / 1e3), 3) for b, n in scores.items() if n})
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
