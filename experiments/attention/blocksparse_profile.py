"""Where one block-sparse attention call's time goes: torch.profiler's table (self CPU time per
op) over a few fwd+bwd calls of one pattern, after a warm-up that builds the plan.

    PYTHONPATH=scripts python experiments/attention/blocksparse_profile.py strided_heads [--dtype float32] [--seq-len 16384] [--threads 2]

Gradients are cleared between calls, so the leaves' gradient accumulation (an artifact of
calling backward repeatedly) does not enter the table.
"""
from __future__ import annotations

import argparse

import torch
from ab_common import inputs  # scripts/ab_common.py: run with PYTHONPATH=scripts

from tfamily.nn.kernels import BlockSparseKernel
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pattern")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pattern = examples(args.seq_len)[args.pattern]
    kernel = BlockSparseKernel("auto")
    q, k, v, grad = inputs(args.seq_len, getattr(torch, args.dtype))

    def call():
        q.grad = k.grad = v.grad = None
        kernel(q, k, v, pattern=pattern)[0].backward(grad)

    call()
    with torch.profiler.profile() as prof:
        for _ in range(args.calls):
            call()
    print(f"{args.pattern}, {args.dtype}, L {args.seq_len}, {args.threads} threads, {args.calls} fwd+bwd calls:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    main()
