"""Per-head patterns: the one-node head groups (FusedHeadGroups) against the unbind/stack route of
an earlier commit, alternated in one process: fwd+bwd ms at 16K, b 1, h 8, d_head 64, 2 threads,
4 rounds each, gradients cleared between calls.

    git show 530e348:src/tfamily/nn/kernels/blocksparse.py > /tmp/old_bs.py
    PYTHONPATH=scripts python experiments/attention/blocksparse_head_groups_ab.py strided_heads,fixed_heads [/tmp/old_bs.py]

The old route is that commit's ``_interleaved_heads``, run against today's kernels.
"""
import ast
import sys
import time

import torch
from tfamily.nn.kernels import blocksparse as bs, BlockSparseKernel
from tfamily.nn.patterns.examples import examples
src = open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/old_bs.py").read()
tree = ast.parse(src)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_interleaved_heads")
ns = {}
exec(compile(ast.Module([fn], []), "old", "exec"), bs.__dict__, ns)
old, new = ns["_interleaved_heads"], bs._interleaved_heads
torch.set_num_threads(2)
L = 16384; P = examples(L)
for name in sys.argv[1].split(","):
    for dt in (torch.float32, torch.bfloat16):
        kern = BlockSparseKernel("auto")
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 8, L, 64, generator=g).to(dt).requires_grad_() for _ in range(3))
        gr = torch.randn(1, 8, L, 64).to(dt)
        f = lambda: kern(q, k, v, pattern=P[name])[0].backward(gr)
        res = {"old": [], "new": []}
        for impl in (old, new):
            bs._interleaved_heads = impl; f()
        for r in range(4):
            for key, impl in (("old", old), ("new", new)):
                bs._interleaved_heads = impl
                q.grad = k.grad = v.grad = None
                t0 = time.perf_counter(); f(); res[key].append((time.perf_counter() - t0) * 1e3)
        print(name, str(dt).split(".")[1], {k_: f"min {min(v_):.0f} med {sorted(v_)[2]:.0f}" for k_, v_ in res.items()}, flush=True)
