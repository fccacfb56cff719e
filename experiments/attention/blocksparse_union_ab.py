"""A union's groups merged inside the kernels (``FusedUnion``: the second group's forward merges
into the first's out and lse in place, its backward adds into the first's dq, dk, dv) against the
earlier route (each group its own output and float32 gradients, merged by ``union_weights`` and
summed in PyTorch), swapped between rounds of one process. fwd+bwd ms, b 1, h 8, d_head 64.

    PYTHONPATH=scripts python experiments/attention/blocksparse_union_ab.py OUT.jsonl strided_merged [--dtype float32] [--seq-len 16384]
        [--threads 2] [--rounds 4]
"""
from __future__ import annotations

import argparse
import json

import torch

from ab_common import add_common_args, fwd_bwd_ms, inputs
from tfamily.nn.kernels import BlockSparseKernel, fused_blocks
from tfamily.nn.kernels.blocksparse import union_weights
from tfamily.nn.kernels.fused_blocks import _NONE, _rows
from tfamily.nn.patterns.examples import examples


class SeparateOutputs(torch.autograd.Function):
    """The route before: one output per group, merged and summed outside the kernels."""

    @staticmethod
    def forward(ctx, q, k, v, bias, calls, ops):
        results = [ops.blocksparse_forward(q, k, v, *args, group, _NONE, _NONE) for args, group in calls]
        lses = torch.stack([r[1] for r in results])
        lowest = torch.finfo(lses.dtype).min
        dead = (lses <= lowest / 2).all(0)
        lse, weights = union_weights(lses)
        out = results[0][0].to(lses.dtype).mul_(weights[0][..., None])
        for (o, _), w in zip(results[1:], weights[1:]):
            out.addcmul_(o, w[..., None])
        lse = lse.masked_fill(dead, lowest)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.calls, ctx.ops, ctx.has_bias = calls, ops, bias is not None
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dout = _rows(dout.to(q.dtype))
        delta = ctx.ops.blocksparse_rowdot(dout, out, lse.new_empty(0))
        dq = dk = dv = None
        for args, group in ctx.calls:
            gq, gk, gv, _ = ctx.ops.blocksparse_backward(q, k, v, *args, lse, delta, dout, False, group, False,
                                                         _NONE, _NONE, _NONE, False)
            if dq is None:
                dq, dk, dv = gq, gk, gv
            else:
                dq.add_(gq), dk.add_(gk), dv.add_(gv)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("patterns", nargs="+")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    add_common_args(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    q, k, v, grad = inputs(args.seq_len, dtype)
    kernel, catalogue = BlockSparseKernel("auto"), examples(args.seq_len)
    merged = fused_blocks.FusedUnion
    routes = {"in_kernel": merged, "separate": SeparateOutputs}
    with open(args.out, "a") as f:
        for name in args.patterns:
            times = {key: [] for key in routes}
            fwd_bwd_ms(kernel, catalogue[name], q, k, v, grad)  # plans built
            for _ in range(args.rounds):
                for key, route in routes.items():
                    fused_blocks.FusedUnion = route
                    times[key].append(fwd_bwd_ms(kernel, catalogue[name], q, k, v, grad))
            fused_blocks.FusedUnion = merged
            row = dict(pattern=name, dtype=args.dtype, seq_len=args.seq_len, threads=args.threads,
                       **{f"{key}_best_ms": round(min(t), 1) for key, t in times.items()},
                       **{f"{key}_median_ms": round(sorted(t)[len(t) // 2], 1) for key, t in times.items()},
                       times_ms={key: [round(x, 1) for x in t] for key, t in times.items()})
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
