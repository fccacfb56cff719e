"""The compiled kernel's small products through its own loop (common.h ``small_mm``) against MKL for
every product, alternated in one process: fwd+bwd ms of one block-sparse call (b 1, h 8, d_head 64),
best and median of ``--rounds`` rounds, per pattern and dtype. The two arms differ only in the
``small_gemm_limit`` op's setting (0: every product through the BLAS).

Tried and not landed: the loop lives in ``small_mm.patch`` beside this script. To rerun, on a scratch
worktree: ``git apply experiments/attention/small_gemm_xeon/small_mm.patch``, then

    python experiments/attention/small_gemm_xeon/ab.py [--seq-len 16384] [--threads 2] [--rounds 4]
        [--dtypes float32 bfloat16] [--limit 131072] [--patterns longformer ...]

Prints one JSON line per (pattern, dtype) and a list at the end.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from tfamily.nn.kernels import BlockSparseKernel, native

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from ab_common import add_common_args, fwd_bwd_ms, inputs  # noqa: E402
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    add_common_args(p)
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--limit", type=int, default=None, help="small-product limit of the loop arm (default: the kernel's)")
    p.add_argument("--patterns", nargs="+", default=["longformer", "sliding_window", "bigbird", "strided_heads",
                                                     "local_1d"])
    args = p.parse_args()
    ops = native.ops()
    if ops is None:
        raise SystemExit("blocksparse_small_gemm_ab: the compiled kernels are unavailable on this machine")
    if not hasattr(ops, "small_gemm_limit"):
        raise SystemExit("ab.py: the compiled kernels lack the small_gemm_limit op; "
                         "`git apply experiments/attention/small_gemm_xeon/small_mm.patch` on a scratch worktree first")
    torch.set_num_threads(args.threads)
    default = ops.small_gemm_limit(-1)
    arms = {"loop": default if args.limit is None else args.limit, "blas": 0}
    L, catalogue = args.seq_len, examples(args.seq_len)
    kernel, out = BlockSparseKernel("auto"), []
    for dtype_name in args.dtypes:
        q, k, v, grad = inputs(L, getattr(torch, dtype_name))
        for name in args.patterns:
            pattern = catalogue[name]

            def call():
                return fwd_bwd_ms(kernel, pattern, q, k, v, grad)

            times = {arm: [] for arm in arms}
            for arm, limit in arms.items():  # plans and warm-up
                ops.small_gemm_limit(limit)
                call()
            for _ in range(args.rounds):
                for arm, limit in arms.items():
                    ops.small_gemm_limit(limit)
                    times[arm].append(call())
            row = dict(pattern=name, dtype=dtype_name, seq_len=L, threads=args.threads, limits=arms,
                       ms={arm: [round(min(t), 1), round(statistics.median(t), 1)] for arm, t in times.items()})
            out.append(row)
            print(json.dumps(row), flush=True)
    ops.small_gemm_limit(default)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
