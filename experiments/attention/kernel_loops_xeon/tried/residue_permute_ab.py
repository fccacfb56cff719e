"""Tried, not landed: the column heads in residue order through the kernel's permuted reads, against
q, k, v transposed into residue order first and run as block-local causal attention in natural
order (read in place), fwd+bwd alternated.
`THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src python residue_permute_ab.py float32 8`."""
import sys, time, torch
torch.set_num_threads(2)
from tfamily.nn.patterns.factorized import StridedColumns, FixedBlock
from tfamily.nn.kernels.blocksparse import BlockSparseKernel
dtype = getattr(torch, sys.argv[1]); n = int(sys.argv[2])
L, b, h, e, l = 16384, 1, 4, 64, 128
kern = BlockSparseKernel(block_size=32)
cols, blk = StridedColumns(stride=l), FixedBlock(block=L // l)
q, k, v = [torch.randn(b, h, L, e, dtype=dtype, requires_grad=True) for _ in range(3)]
g = torch.randn(b, h, L, e, dtype=dtype)
def fwd_a():
    return kern(q, k, v, pattern=cols)[0]
def perm(x):  # natural -> residue order: [c, t] = x[t*l + c]
    return x.view(b, h, L // l, l, e).transpose(2, 3).reshape(b, h, L, e)
def unperm(x):
    return x.view(b, h, l, L // l, e).transpose(2, 3).reshape(b, h, L, e)
def fwd_b():
    return unperm(kern(perm(q), perm(k), perm(v), pattern=blk)[0])
def run(f):
    for x in (q, k, v): x.grad = None
    t = time.perf_counter(); o = f(); t1 = time.perf_counter(); o.backward(g); t2 = time.perf_counter()
    return o, (t1 - t) * 1e3, (t2 - t1) * 1e3
oa, _, _ = run(fwd_a); ga = [x.grad.clone() for x in (q, k, v)]
ob, _, _ = run(fwd_b); gb = [x.grad.clone() for x in (q, k, v)]
print("out diff", float((oa - ob).abs().max()), "grad diffs", [float((x - y).abs().max()) for x, y in zip(ga, gb)])
res = {"kernel in residue order": [], "permute + natural kernel": []}
for r in range(n):
    for name, f in zip(res, (fwd_a, fwd_b)):
        res[name].append(run(f)[1:])
for name, rows in res.items():
    tot = sorted(a + c for a, c in rows); fw = sorted(a for a, _ in rows); bw = sorted(c for _, c in rows)
    print(f"{dtype} {name:26s} fwd+bwd best {tot[0]:.1f} median {tot[n//2]:.1f}  (fwd best {fw[0]:.1f}, bwd best {bw[0]:.1f})")
