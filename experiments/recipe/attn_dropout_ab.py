# CPU attention-probability dropout: SDPA (math path when dropout_p > 0) against the compiled block
# kernel, fwd+bwd at b4 h4 L1024 e32, one thread, alternating. Run: PYTHONPATH=src python experiments/recipe/attn_dropout_ab.py
import time, torch, torch.nn.functional as F
from tfamily.nn.kernels.blocksparse import BlockSparseKernel
from tfamily.nn.patterns import resolve
from tfamily.spec import PatternSpec
torch.set_num_threads(1)
b,h,L,e=4,4,1024,32
q,k,v=[torch.randn(b,h,L,e,requires_grad=True) for _ in range(3)]
win = resolve(PatternSpec("sliding_window", {"window": L}), layer=0)
bs = BlockSparseKernel(64)
def sd(p): return lambda: F.scaled_dot_product_attention(q,k,v,is_causal=True,dropout_p=p)
def bsk(p): return lambda: bs(q,k,v,pattern=win,dropout_p=p)[0]
cands={"sdpa p0":sd(0.0),"sdpa p0.1":sd(0.1),"blocksparse p0":bsk(0.0),"blocksparse p0.1":bsk(0.1)}
res={n:[] for n in cands}
for r in range(4):
  for n,f in cands.items():
    t=time.perf_counter(); f().sum().backward(); res[n].append(time.perf_counter()-t)
for n,t in res.items(): print(f"{n:18s} {1000*min(t[1:]):8.1f} ms")
