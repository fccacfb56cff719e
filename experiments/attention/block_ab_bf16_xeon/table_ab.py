"""Same-process A/B of ``block_size="auto"``'s two cost tables for bf16 on an AMX CPU: the fp32
table the compiled kernel used before ("fused") against its own ("fused_amx_bf16"), fwd+bwd at
16K, 2 threads, b=1, h=8, e=64, rounds alternating (ABBA). The route is switched by the engine
that ``blocksparse.group_plan`` asks ``cost_engine`` for; both routes' plans stay cached.

    THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src:scripts python experiments/attention/block_ab_bf16_xeon/table_ab.py OUT.jsonl \
        [--rounds 6] strided_heads strided_merged fixed_heads ...
"""
import argparse
import json

import torch

from ab_common import fwd_bwd_ms, inputs
from tfamily.nn.kernels import BlockSparseKernel, blocksparse, layout
from tfamily.nn.patterns.examples import examples

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("patterns", nargs="+")
p.add_argument("--rounds", type=int, default=6)
p.add_argument("--seq-len", type=int, default=16384)
args = p.parse_args()
torch.set_num_threads(2)
L = args.seq_len
q, k, v, grad = inputs(L, torch.bfloat16)
kernel = BlockSparseKernel("auto")
real = layout.cost_engine
ROUTES = {"old_table": lambda *a: "fused", "new_table": real}
if real(True, torch.bfloat16) != "fused_amx_bf16":
    raise SystemExit("this CPU has no AMX: both routes would use the same table")
for name in args.patterns:
    pattern = examples(L)[name]
    picks = {}
    for route, fn in ROUTES.items():
        blocksparse.cost_engine = fn
        layout._BEST.clear()
        fwd_bwd_ms(kernel, pattern, q, k, v, grad)  # plans and warm-up
        picks[route] = sorted({b for key, b in layout._BEST.items() if key[2] == L})
        fwd_bwd_ms(kernel, pattern, q, k, v, grad)
    times = {route: [] for route in ROUTES}
    for r in range(args.rounds):
        for route in (list(ROUTES) if r % 2 == 0 else list(ROUTES)[::-1]):
            blocksparse.cost_engine = ROUTES[route]
            times[route].append(round(fwd_bwd_ms(kernel, pattern, q, k, v, grad), 1))
    blocksparse.cost_engine = real
    row = dict(pattern=name, dtype="bfloat16", seq_len=L, rounds=args.rounds, picks=picks,
               **{f"{route}_best_ms": min(t) for route, t in times.items()},
               **{f"{route}_median_ms": sorted(t)[len(t) // 2] for route, t in times.items()},
               **{f"{route}_ms": t for route, t in times.items()})
    print(json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
