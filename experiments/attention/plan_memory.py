"""Memory and time of a block-sparse pattern's first call in a fresh process: RSS growth over the
inputs after the forward (plan included) and after the backward, and the first call's seconds.

    PYTHONPATH=scripts python experiments/attention/plan_memory.py bigbird 65536 [--block auto|64|...] [--threads 2]

Run one pattern per process (the RSS peak is the process's own). fp32, b 1, h 8, d_head 64.
"""
from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from tfamily.nn.kernels import BlockSparseKernel, native
from tfamily.nn.patterns.examples import examples


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pattern")
    p.add_argument("seq_len", type=int)
    p.add_argument("--block", default="auto")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L = args.seq_len
    q, k, v, grad = (torch.randn(1, 8, L, 64) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    base = _rss_mb()
    kernel = BlockSparseKernel(args.block if args.block == "auto" else int(args.block))
    native.ops()  # loaded (or built) before the clock starts: the time is the plan's and the call's
    t0 = time.perf_counter()
    out = kernel(q, k, v, pattern=examples(L)[args.pattern])[0]
    fwd = _rss_mb()
    out.backward(grad)
    print(json.dumps(dict(pattern=args.pattern, seq_len=L, block=args.block, inputs_mb=round(base),
                          fwd_growth_mb=round(fwd - base), fwd_bwd_growth_mb=round(_rss_mb() - base),
                          first_call_s=round(time.perf_counter() - t0, 1))))


if __name__ == "__main__":
    main()
