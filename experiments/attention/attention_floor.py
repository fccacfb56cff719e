"""How much of issue 18's time budget is left for computing, once the memory traffic that every
attention call has is paid.

Any attention fwd+bwd that hands autograd fresh tensors (out, then dq, dk, dv) reads q, k, v and
dO and writes those four (b, h, L, e) tensors into new memory, whose pages the OS must map. The
"null" attention below does only that: out = a copy of v, dq = dk = dv = copies of dO. Its time is
a floor under every kernel's, SDPA's included. For a dense call it is noise; for a pattern whose
target (1.5 x causal density x SDPA's time) is a few tens of ms it is not.

In one process, alternating rounds (best of N): dense causal SDPA, the null attention, and each
pattern through ``BlockSparseKernel("auto")``. Per pattern it prints the target, the pattern's time,
and both with the null floor taken off. Rows go to OUT as JSON.

    PYTHONPATH=scripts python experiments/attention/attention_floor.py OUT.json strided_heads sliding_window [--dtype bfloat16]
        [--seq-len 16384] [--threads 2] [--rounds 3]

It runs as ``tfamily bench attention``'s workers do, with ``THP_MEM_ALLOC_ENABLE=1`` (PyTorch
asks for transparent huge pages for large tensors) unless the variable is set:
``THP_MEM_ALLOC_ENABLE=0`` measures the floor without them.
"""
from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # read once, at torch's first large allocation

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ab_common import add_common_args, causal_density, inputs  # noqa: E402  (scripts/ab_common.py: run with PYTHONPATH=scripts)
from tfamily.nn.kernels import BlockSparseKernel  # noqa: E402
from tfamily.nn.patterns.examples import examples  # noqa: E402


class NullAttention(torch.autograd.Function):
    """The memory traffic of an attention call and nothing else."""

    @staticmethod
    def forward(ctx, q, k, v):
        return v.clone()

    @staticmethod
    def backward(ctx, dout):
        return dout.clone(), dout.clone(), dout.clone()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("patterns", nargs="+")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    add_common_args(p, rounds=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L = args.seq_len
    q, k, v, grad = inputs(L, getattr(torch, args.dtype))
    kernel = BlockSparseKernel("auto")
    cat = examples(L)
    fns = {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad),
           "null": lambda: NullAttention.apply(q, k, v).backward(grad)}
    for name in args.patterns:
        fns[name] = lambda pat=cat[name]: kernel(q, k, v, pattern=pat)[0].backward(grad)
    for fn in fns.values():  # plans built, pages of the allocator's first calls mapped
        fn()
    times = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            q.grad = k.grad = v.grad = None
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    best = {name: min(ts) for name, ts in times.items()}
    rows = []
    for name in args.patterns:
        density = causal_density(cat[name], L)
        target = 1.5 * density * best["sdpa"]
        rows.append(dict(pattern=name, dtype=args.dtype, seq_len=L, threads=args.threads,
                         thp=os.environ["THP_MEM_ALLOC_ENABLE"],
                         causal_density=round(density, 5), sdpa_ms=round(best["sdpa"], 1),
                         null_ms=round(best["null"], 1), target_ms=round(target, 1),
                         pattern_ms=round(best[name], 1), ratio=round(best[name] / target * 1.5, 2),
                         budget_after_null_ms=round(target - best["null"], 1),
                         pattern_after_null_ms=round(best[name] - best["null"], 1),
                         times_ms={k: [round(t, 1) for t in times[k]] for k in ("sdpa", "null", name)}))
        r = rows[-1]
        print(f"{name:16s} {args.dtype}: sdpa {r['sdpa_ms']:.0f} ms, target {r['target_ms']:.0f}, "
              f"pattern {r['pattern_ms']:.0f} ({r['ratio']:.2f}x density x SDPA), null {r['null_ms']:.0f}; "
              f"after the null floor: budget {r['budget_after_null_ms']:.0f}, pattern {r['pattern_after_null_ms']:.0f}")
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
