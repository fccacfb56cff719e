"""Tile sizes of the compiled block-sparse kernel against each other, alternated in one process:
fwd+bwd ms of one attention call (b 1, h 8, d_head 64) per pattern and block size, best and median
of ``--rounds`` rounds, beside the size ``block_size="auto"`` picks (``layout._ROW_COST_COMPILED``).

    python scripts/blocksparse_block_ab.py [--seq-len 16384] [--threads 2] [--rounds 4]
        [--dtype float32|bfloat16] [--blocks 32 64 128] [--patterns strided_heads ...]

Prints one JSON line per pattern ({block: [best, median]}, the auto pick and its ms) and a list at the end.
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
        for b in sizes:
            call(b)  # plans and warm-up
        picked = sorted({blk for key, blk in layout._BEST.items() if key[2] == L})
        times = {b: [] for b in sizes}
        for _ in range(args.rounds):
            for b in sizes:
                times[b].append(call(b))
        row = dict(pattern=name, seq_len=L, threads=args.threads, dtype=args.dtype, auto_picks=picked,
                   ms={str(b): [round(min(t), 1), round(statistics.median(t), 1)] for b, t in times.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
