"""CPU SDPA forward + backward, causal, in bf16 against the same call in fp32 on the bf16 values
(cast back), alternating call by call, one thread; the rows behind
``tfamily.nn.kernels.sdpa.CPU_HALF_UPCAST_MAX``.

    python experiments/recipe/demo_bf16/attention_ab.py > experiments/recipe/demo_bf16/attention.csv
"""
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def bf16(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def via_fp32(q, k, v):
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16()


def once(f, q, k, v) -> float:
    t0 = time.perf_counter()
    f(q, k, v).float().sum().backward()
    return time.perf_counter() - t0


print("head_dim,seq_len,batch,heads,bf16_ms,via_fp32_ms,ratio")
for e in (32, 64):
    for L in (64, 128, 192, 256, 384, 512, 1024):
        b = max(1, 8192 // L)
        q, k, v = (torch.randn(b, 4, L, e, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        times = {bf16: [], via_fp32: []}
        for i in range(23):
            for f in (bf16, via_fp32) if i % 2 else (via_fp32, bf16):
                t = once(f, q, k, v)
                if i >= 3:
                    times[f].append(t)
        a, c = (sorted(times[f])[len(times[f]) // 2] * 1e3 for f in (bf16, via_fp32))
        print(f"{e},{L},{b},4,{a:.2f},{c:.2f},{a / c:.2f}", flush=True)
print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread", file=sys.stderr)
