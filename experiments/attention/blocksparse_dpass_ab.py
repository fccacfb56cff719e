"""The backward's D = rowsum(dO O) - d lse and the rounding of bf16 gradients: the compiled route
(``blocksparse_rowdot``, gradients rounded in the kernel) against the earlier Python route
(``(dO * O).sum(-1)`` in fp32 temporaries, fp32 gradients rounded by ``.to``), swapped in
``FusedBlockSparse.backward`` between rounds of one process. fwd+bwd ms at 16K, b 1, h 8,
d_head 64, best and median of 4 rounds each.

    PYTHONPATH=scripts python experiments/attention/blocksparse_dpass_ab.py sliding_window,local_1d,strided_heads [--threads 2]
"""
from __future__ import annotations

import argparse
import time

import torch

from tfamily.nn.kernels import BlockSparseKernel, fused_blocks
from tfamily.nn.kernels.fused_blocks import _NONE, _rows
from tfamily.nn.patterns.examples import examples


def python_route(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dout = torch.zeros_like(out) if dout is None else _rows(dout.to(q.dtype))
    acc = lse.dtype
    delta = (dout.to(acc) * out.to(acc)).sum(-1)
    if dlse is not None:
        delta = delta - dlse.to(acc)
    bias_grad = ctx.has_bias and ctx.needs_input_grad[3]
    dq, dk, dv, db = ctx.ops.blocksparse_backward(q, k, v, *ctx.args, lse, delta.contiguous(), dout, bias_grad,
                                                   ctx.group, False, _NONE, _NONE, _NONE, False)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), (db if bias_grad else None), None, None, None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("patterns")
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L = args.seq_len
    catalogue = examples(L)
    routes = {"python": python_route, "compiled": fused_blocks.FusedBlockSparse.backward}
    for name in args.patterns.split(","):
        for dt in (torch.float32, torch.bfloat16):
            kernel = BlockSparseKernel("auto")
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, 8, L, 64, generator=gen).to(dt).requires_grad_() for _ in range(3))
            grad = torch.randn(1, 8, L, 64, generator=gen).to(dt)

            def call():
                q.grad = k.grad = v.grad = None
                kernel(q, k, v, pattern=catalogue[name])[0].backward(grad)

            times = {key: [] for key in routes}
            call()
            for _ in range(4):
                for key, route in routes.items():
                    fused_blocks.FusedBlockSparse.backward = staticmethod(route)
                    t0 = time.perf_counter()
                    call()
                    times[key].append((time.perf_counter() - t0) * 1e3)
            fused_blocks.FusedBlockSparse.backward = staticmethod(routes["compiled"])
            print(name, str(dt).split(".")[1],
                  {key: f"best {min(t):.0f} median {sorted(t)[2]:.0f}" for key, t in times.items()}, flush=True)


if __name__ == "__main__":
    main()
