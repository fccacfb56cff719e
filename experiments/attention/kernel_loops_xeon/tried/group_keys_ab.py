"""Same-process A/B of fused_blocks.GROUP_KEYS (keys per tile GEMM group), 16K, 2 threads, auto tiles,
rounds alternating: python experiments/attention/kernel_loops_xeon/tried/group_keys_ab.py DTYPE ROUNDS 256,512,1024 PATTERN...
(run from the checkout root with PYTHONPATH=src and THP_MEM_ALLOC_ENABLE=1). Rows: group_keys_16k_bfloat16.jsonl."""
import sys, json, torch
sys.path.insert(0, "scripts")
from ab_common import fwd_bwd_ms, inputs
from tfamily.nn.kernels import BlockSparseKernel, fused_blocks
from tfamily.nn.patterns.examples import examples
torch.set_num_threads(2)
dtype = getattr(torch, sys.argv[1]); L = 16384; rounds = int(sys.argv[2]); values = [int(x) for x in sys.argv[3].split(",")]
q, k, v, grad = inputs(L, dtype)
kernel = BlockSparseKernel("auto")
for name in sys.argv[4:]:
    pat = examples(L)[name]
    for g in values:
        fused_blocks.GROUP_KEYS = g; fwd_bwd_ms(kernel, pat, q, k, v, grad)
    t = {g: [] for g in values}
    for r in range(rounds):
        for g in (values if r % 2 == 0 else values[::-1]):
            fused_blocks.GROUP_KEYS = g; t[g].append(fwd_bwd_ms(kernel, pat, q, k, v, grad))
    print(json.dumps(dict(pattern=name, dtype=sys.argv[1], best={g: round(min(x), 1) for g, x in t.items()},
                          median={g: round(sorted(x)[len(x)//2], 1) for g, x in t.items()})), flush=True)
