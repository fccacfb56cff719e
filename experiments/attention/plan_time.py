"""Seconds to build one pattern's block plan(s) at a fixed tile size (no kernel call), fp32 CPU,
8 heads: the planning part of a first call.

    PYTHONPATH=scripts python experiments/attention/plan_time.py bigbird 65536 32 [--threads 2] [--profile]

Prints ``PATTERN L BLOCK SECONDS s``; ``--profile`` adds cProfile's top 25 by cumulative time.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

from tfamily.nn.kernels.layout import build_plan, parts_per_head, split
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pattern")
    p.add_argument("seq_len", type=int)
    p.add_argument("block", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L, pattern, heads = args.seq_len, examples(args.seq_len)[args.pattern], tuple(range(8))

    def build():
        for qo, parts in split(pattern):
            build_plan(parts, qo, L, L, 0, args.block, heads if parts_per_head(parts) else None, torch.device("cpu"))

    t0 = time.perf_counter()
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(build)
        pstats.Stats(prof).sort_stats("cumtime").print_stats(25)
    else:
        build()
    print(args.pattern, L, args.block, round(time.perf_counter() - t0, 2), "s")


if __name__ == "__main__":
    main()
