"""A/B: eight prompts of different lengths (16..128 tokens) continued by 64 greedy tokens,
as one left-padded batch against one prompt at a time, alternating in one process.
Run: .venv/bin/python experiments/generation/ab_batched_prompts.py [threads]"""
import sys
import time

import torch

import tfamily
from tfamily.models.generate import generate

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
torch.manual_seed(0)
model = tfamily.build(tfamily.members.gpt(d_model=256, vocab_size=256, depth__n_layers=4, heads__n_heads=4,
                                          dropout=0.0, position__max_len=256)).eval()
prompts = [torch.randint(0, 256, (n,)) for n in (16, 32, 48, 64, 80, 96, 112, 128)]
NEW = 64
batched = generate(model, prompts, NEW, greedy=True)
alone = [generate(model, p[None], NEW, greedy=True)[0] for p in prompts]
same = sum(torch.equal(a, b) for a, b in zip(batched, alone))
rows = {"batched": [], "one at a time": []}
for _ in range(3):
    t = time.perf_counter()
    generate(model, prompts, NEW, greedy=True)
    rows["batched"].append(time.perf_counter() - t)
    t = time.perf_counter()
    for p in prompts:
        generate(model, p[None], NEW, greedy=True)
    rows["one at a time"].append(time.perf_counter() - t)
print(f"threads {torch.get_num_threads()}, rows equal to alone: {same}/{len(prompts)}")
for name, times in rows.items():
    best = min(times)
    print(f"{name:>14}: {len(prompts) * NEW / best:7.0f} new tokens/s (best of 3, {best:.2f} s)")
