"""The `gpt` member's compiled forward and backward graphs against the flat nanoGPT-definition peer's,
at nanoGPT's train_shakespeare_char shape with the same model choices (no biases, exact GELU, dropout
0.2), bf16 autocast: aten operations per graph (traced with AOTAutograd on the CPU, no kernel run on a
GPU), and those whose counts differ.

    python experiments/recipe/graph_ops.py
"""
import collections

import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd

from tfamily import members
from tfamily.bench.flat_gpt import FlatGPT
from tfamily.build import build

torch.manual_seed(0)
V, D, L, H, T = 65, 384, 6, 6, 256
ours = build(members.gpt(d_model=D, vocab_size=V, dropout=0.2, bias=False, ff={"activation": "gelu"},
                         heads=dict(n_heads=H), depth=dict(n_layers=L), position=dict(max_len=T)))
flat = FlatGPT(V, D, L, H, H, T, bias=False, approximate="none", dropout=0.2)


def count(fn, *args) -> dict:
    """{"fw": Counter, "bw": Counter} of the aten calls in ``fn``'s compiled forward and backward."""
    graphs = {}

    def keep(kind):
        def compiler(gm, example):
            graphs[kind] = collections.Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
            return gm.forward
        return compiler
    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")))(*args).backward()
    return graphs


def loss_ours(x, y):
    return ours.loss({"x": x, "y": y})[0]


def loss_flat(x, y):
    return F.cross_entropy(flat(x).flatten(0, 1).float(), y.flatten())


x, y = torch.randint(0, V, (2, T)), torch.randint(0, V, (2, T))
with torch.autocast("cpu", torch.bfloat16):
    a, b = count(loss_ours, x, y), count(loss_flat, x, y)
for kind in ("fw", "bw"):
    ca, cb = a[kind], b[kind]
    print(f"== {kind}: ours {sum(ca.values())} ops, flat {sum(cb.values())} ops")
    for k in sorted(set(ca) | set(cb), key=lambda k: -(ca[k] - cb[k])):
        if ca[k] != cb[k]:
            print(f"  {k}: ours {ca[k]} flat {cb[k]}")
