"""Same-process A/B of the block-sparse kernel's loops, before and after this change: fwd+bwd at
16K, 2 threads, b=1, h=8, e=64, the bench's tile sizes, rounds alternating (ABBA order).

Needs the temporary ``set_variant`` op of ``variant.patch``: ``git apply`` it on a scratch
worktree of commit 0811db2, which landed the change. Variant 8 is the old route (a keep-mask buffer
filled per group and multiplied in, the row max as ``std::max``, which GCC left scalar), 1 the new
one (scores masked in place, the row max as a select); 17 adds a change tried and not landed (bf16
backward: each thread's fp32 dK/dV slab kept across calls instead of a fresh tensor;
``scratch_slabs_16k.jsonl``, run with ``--before 1 --after 17``). Outputs and gradients of the two
routes are compared too (``max_abs_diff``; 0.0 in every row).

    THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src python experiments/attention/kernel_loops_xeon/ab.py OUT.jsonl \
        --dtype bfloat16 --rounds 4 sliding_window local_2d ...
"""
import argparse
import json
import time

import torch

from tfamily.nn.kernels import KERNELS, native
from tfamily.nn.patterns.examples import examples

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("patterns", nargs="+")
p.add_argument("--dtype", default="float32")
p.add_argument("--rounds", type=int, default=4)
p.add_argument("--seq-len", type=int, default=16384)
p.add_argument("--before", type=int, default=8, help="variant of the 'before' route")
p.add_argument("--after", type=int, default=1, help="variant of the 'after' route")
args = p.parse_args()
torch.set_num_threads(2)
ops = native.ops()
dtype, L = getattr(torch, args.dtype), args.seq_len
q, k, v = (torch.randn(1, 8, L, 64, dtype=dtype, requires_grad=True) for _ in range(3))
grad = torch.randn(1, 8, L, 64, dtype=dtype)
kernel = KERNELS["blocksparse"](block_size="auto")
ROUTES = {"before": args.before, "after": args.after}
for name in args.patterns:
    pattern = examples(L)[name]

    def step():
        for x in (q, k, v):
            x.grad = None
        out = kernel(q, k, v, pattern=pattern)[0]
        out.backward(grad)
        return out.detach()

    got = {}
    for route, flag in ROUTES.items():
        ops.set_variant(flag)
        got[route] = [step()] + [x.grad.clone() for x in (q, k, v)]
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got["before"], got["after"]))
    times = {route: [] for route in ROUTES}
    for r in range(args.rounds):
        for route in (list(ROUTES) if r % 2 == 0 else list(ROUTES)[::-1]):
            ops.set_variant(ROUTES[route])
            t0 = time.perf_counter()
            step()
            times[route].append(round((time.perf_counter() - t0) * 1e3, 1))
    ops.set_variant(ROUTES["after"])
    row = dict(pattern=name, dtype=args.dtype, seq_len=L, rounds=args.rounds, max_abs_diff=diff,
               **{f"{route}_best_ms": min(t) for route, t in times.items()},
               **{f"{route}_median_ms": sorted(t)[len(t) // 2] for route, t in times.items()},
               **{f"{route}_ms": t for route, t in times.items()})
    print(json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
