"""bf16 against fp32 in the compiled block-sparse kernel, alternated in one process: fwd+bwd ms of
one attention call (b 1, h 8, d_head 64) per pattern, the best of ``--rounds`` rounds each.

    PYTHONPATH=scripts python experiments/attention/blocksparse_bf16_ab.py [--seq-len 16384] [--threads 2] [--rounds 3] [--patterns ...]

Prints one JSON list (pattern, fp32_ms, bf16_ms, speedup). bf16 runs the bf16 tile kernel where the
CPU has bf16 instructions (``fused_blocks.bf16_tiles``), else it is computed in fp32.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from tfamily.nn.kernels import BlockSparseKernel, fused_blocks
from tfamily.nn.patterns.examples import examples


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--patterns", nargs="+", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L = args.seq_len
    catalogue = examples(L)
    rows = []
    for name in args.patterns or [n for n in catalogue if n != "causal"]:
        kernel = BlockSparseKernel("auto")
        gen = torch.Generator().manual_seed(0)
        base = [torch.randn(1, 8, L, 64, generator=gen) for _ in range(4)]
        calls = {}
        for dt in (torch.float32, torch.bfloat16):
            q, k, v = (t.to(dt).requires_grad_() for t in base[:3])
            grad = base[3].to(dt)
            calls[str(dt).split(".")[1]] = (lambda q=q, k=k, v=v, grad=grad:
                                             kernel(q, k, v, pattern=catalogue[name])[0].backward(grad))
        best = {key: float("inf") for key in calls}
        for fn in calls.values():
            fn()  # plans and warm-up
        for _ in range(args.rounds):
            for key, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                best[key] = min(best[key], (time.perf_counter() - t0) * 1e3)
        rows.append(dict(pattern=name, seq_len=L, threads=args.threads, fp32_ms=round(best["float32"], 1),
                         bf16_ms=round(best["bfloat16"], 1), speedup=round(best["float32"] / best["bfloat16"], 2),
                         bf16_tiles=fused_blocks.bf16_tiles()))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
