"""Tried, not landed: the strided pattern's column heads (4 heads, 16K, stride 128) through the
block-sparse kernel against SDPA batched over the 128 residue classes (each a causal sequence of
128), fwd+bwd alternated. `THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src python sdpa_columns_ab.py float32`."""
import os, sys, time, torch, math
import torch.nn.functional as F
torch.set_num_threads(2)
from tfamily.nn.patterns.factorized import strided, StridedColumns
from tfamily.nn.kernels.blocksparse import BlockSparseKernel
from tfamily.nn.patterns import Causal
dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
L, b, h, e, l = 16384, 1, 4, 64, 128
pat = StridedColumns(stride=l)
kern = BlockSparseKernel(block_size=32)
def mk():
    return [torch.randn(b, h, L, e, dtype=dtype, requires_grad=True) for _ in range(3)]
q, k, v = mk(); g = torch.randn(b, h, L, e, dtype=dtype)
def ours():
    out, _ = kern(q, k, v, pattern=pat); out.backward(g)
def sdpa_cols():
    # residue order: pos = t*l + c -> (c, t)
    qs, ks, vs = (x.view(b, h, L // l, l, e).transpose(2, 3).reshape(b, h * l, L // l, e) for x in (q, k, v))
    o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
    out = o.view(b, h, l, L // l, e).transpose(2, 3).reshape(b, h, L, e)
    out.backward(g)
# equivalence
for x in (q, k, v): x.grad = None
ours(); ref = [x.grad.clone() for x in (q, k, v)]
for x in (q, k, v): x.grad = None
sdpa_cols(); new = [x.grad.clone() for x in (q, k, v)]
print("max grad diff", [float((a - c).abs().max()) for a, c in zip(ref, new)])
ts = {"ours": [], "sdpa": []}
for r in range(8):
    for name, fn in (("ours", ours), ("sdpa", sdpa_cols)):
        for x in (q, k, v): x.grad = None
        t = time.perf_counter(); fn(); ts[name].append((time.perf_counter() - t) * 1e3)
for n, v_ in ts.items(): print(dtype, n, "best %.1f median %.1f" % (min(v_), sorted(v_)[len(v_)//2]))
