"""The reverted brgemm route of the bf16 block-sparse kernel against MKL's, alternated in one
process (the patch's op ``tiles_brgemm`` switches between rounds): fwd+bwd ms, best and median.

    git apply experiments/attention/brgemm_xeon/prepacked.patch      (on a scratch worktree)
    python experiments/attention/brgemm_xeon/ab.py [--seq-len 16384] [--threads 2] [--rounds 3] [--patterns ...]
"""
import argparse
import json
import statistics
import time

import torch

from tfamily.nn.kernels import BlockSparseKernel, native
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--patterns", nargs="+", default=["sliding_window", "local_1d", "strided_heads", "bigbird"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ops = native.ops()
    if ops is None or not hasattr(ops, "tiles_brgemm") or not ops.tiles_brgemm(-1):
        raise SystemExit("ab.py: apply prepacked.patch first, on a CPU where ATen runs brgemm (AMX)")
    L, catalogue = args.seq_len, examples(args.seq_len)
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(1, 8, L, 64, generator=gen).to(torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    for name in args.patterns:
        kernel = BlockSparseKernel("auto")
        times = {"brgemm": [], "mkl": []}
        for rnd in range(args.rounds + 1):  # round 0: plans and warm-up
            for key in times:
                ops.tiles_brgemm(1 if key == "brgemm" else 0)
                q.grad = k.grad = v.grad = None
                t0 = time.perf_counter()
                kernel(q, k, v, pattern=catalogue[name])[0].backward(grad)
                if rnd:
                    times[key].append((time.perf_counter() - t0) * 1e3)
        print(json.dumps(dict(pattern=name, seq_len=L, threads=args.threads,
                              **{key: [round(min(t), 1), round(statistics.median(t), 1)] for key, t in times.items()})))


if __name__ == "__main__":
    main()
