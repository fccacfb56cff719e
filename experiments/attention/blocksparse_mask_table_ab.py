"""The plan's shared mask table against one stored mask per tile entry (the plan format before the
table), alternated in one process: fwd+bwd ms of one compiled block-sparse call (b 1, h 8,
d_head 64), best and median of ``--rounds`` rounds. Both runs use the same plan and kernel; only
the ``masks`` buffer the kernel reads (and ``mids`` into it) differ.

    PYTHONPATH=scripts python experiments/attention/blocksparse_mask_table_ab.py [--seq-len 16384] [--threads 2] [--rounds 4]
        [--dtype float32|bfloat16] [--block auto|64|...] [--patterns bigbird longformer ...]

Prints one JSON line per pattern and a list at the end.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

from ab_common import add_common_args, fwd_bwd_ms, inputs
from tfamily.nn.kernels import BlockSparseKernel, layout
from tfamily.nn.patterns.examples import examples


def _per_entry(rows: tuple) -> tuple:
    """The same plan rows with every partial entry holding its own copy of its mask."""
    *head, mids, widths, masks = rows
    partial = mids >= 0
    own = torch.full_like(mids, -1)
    own[partial] = torch.arange(int(partial.sum()), dtype=mids.dtype)
    return (*head, own, widths, masks[mids[partial].long()].contiguous())


def main() -> None:
    p = argparse.ArgumentParser()
    add_common_args(p)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--block", default="auto")
    p.add_argument("--patterns", nargs="+", default=["bigbird", "longformer", "sliding_window", "local_1d"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L, dtype = args.seq_len, getattr(torch, args.dtype)
    catalogue = examples(L)
    q, k, v, grad = inputs(L, dtype)
    kernel = BlockSparseKernel(args.block if args.block == "auto" else int(args.block))
    out = []
    for name in args.patterns:
        pattern = catalogue[name]

        def call():
            return fwd_bwd_ms(kernel, pattern, q, k, v, grad)

        layout.PLANS.clear()
        call()  # plans and warm-up
        plans = list(layout.PLANS._plans.values())
        variants = {"table": [pl.cache["rows"] for pl in plans],
                    "per_entry": [_per_entry(pl.cache["rows"]) for pl in plans]}
        sizes = {kind: sum(r[-1].numel() for r in rows) for kind, rows in variants.items()}
        times = {kind: [] for kind in variants}
        for _ in range(args.rounds):
            for kind, rows in variants.items():
                for pl, r in zip(plans, rows):
                    pl.cache["rows"] = r
                call()  # the first call after a swap warms the caches for this layout
                times[kind].append(call())
        row = dict(pattern=name, seq_len=L, threads=args.threads, dtype=args.dtype, block=args.block,
                   mask_bytes={kind: n for kind, n in sizes.items()},
                   ms={kind: [round(min(t), 1), round(statistics.median(t), 1)] for kind, t in times.items()})
        out.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
