"""Equivalence of the block-sparse kernels on CUDA, forward AND backward (CPU FlexAttention is
forward-only in torch 2.13, so the flex backward can only be checked on a GPU).

For every catalogue pattern: ``flex`` and ``blocksparse`` against the dense ``reference`` kernel
in outputs and in q, k, v (and bias) gradients, at a length off the tile grid, with grouped-query
heads, padded keys, a query offset and an additive bias. Prints one row per case and writes them
as JSON; exits 1 if any case fails.

Usage: python scripts/cuda_kernel_check.py OUT.json [--device cuda] [--length 400] [--block 128]
       [--kernels blocksparse flex]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from tfamily.nn.kernels import BlockSparseKernel, FlexKernel, ReferenceKernel
from tfamily.nn.patterns.examples import examples


def _case(kernel, pattern, n, m, offset, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, n, 32, generator=g)
    k, v = (torch.randn(2, 2, m, 32, generator=g) for _ in range(2))
    bias = torch.randn(1, 4, n, m, generator=g)
    pad = torch.rand(2, m, generator=g) > 0.15
    do = torch.randn(2, 4, n, 32, generator=g)
    results = []
    for kern in (kernel, ReferenceKernel()):
        ins = [t.to(device, dtype).clone().requires_grad_() for t in (q, k, v, bias)]
        out, _ = kern(*ins[:3], pattern=pattern, q_offset=offset, key_padding=pad.to(device),
                      bias=ins[3])
        out.backward(do.to(device, dtype))
        results.append([out.detach().float().clone()] + [t.grad.float().clone() for t in ins])
    return [(got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
            for got, ref in zip(*results)]


OFFSET_FLEX = ("bigbird", "strided_merged", "mixed_heads")


def _write(path, args, rows, failed):
    meta = dict(torch=torch.__version__, device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                length=args.length, block=args.block, cases=len(rows), failed=failed)
    with open(path, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    return meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--length", type=int, default=400)
    ap.add_argument("--block", type=int, default=128, help="flex on CUDA needs a multiple of 128")
    ap.add_argument("--kernels", nargs="+", default=["blocksparse", "flex"])
    args = ap.parse_args()
    n = args.length
    rows, failed = [], 0
    tol = {torch.float32: 2e-4, torch.bfloat16: 3e-2}
    cases = [(kname, name, dtype, offset) for kname in args.kernels
             for name in examples(n, toys=True) for dtype, offset in
             ((torch.float32, 0), (torch.float32, 40), (torch.bfloat16, 0))
             # flex compiles once per shape and dtype: fp32 with and without an offset, the rest
             # of the device time goes to the blocksparse cases
             if kname == "blocksparse" or (dtype == torch.float32 and (offset == 0 or name in OFFSET_FLEX))]
    kernels = dict(flex=FlexKernel(args.block), blocksparse=BlockSparseKernel(args.block))
    for kname, name, dtype, offset in cases:
        t0 = time.perf_counter()
        try:
            errs = _case(kernels[kname], examples(n, toys=True)[name], n - offset, n, offset, dtype,
                         args.device, seed=len(rows))
            ok, err = max(errs) <= tol[dtype], None
        except Exception as e:  # report and go on: one broken case must not hide the rest
            errs, ok, err = [], False, f"{type(e).__name__}: {e}"[:300]
        failed += not ok
        row = dict(pattern=name, kernel=kname, dtype=str(dtype).split(".")[-1], q_offset=offset,
                   rel_err_out_dq_dk_dv_dbias=errs, ok=ok, error=err, seconds=round(time.perf_counter() - t0, 2))
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(args.out, args, rows, failed)  # a timeout keeps every finished case
    print(json.dumps(_write(args.out, args, rows, failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
