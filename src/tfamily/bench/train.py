"""Training throughput: tokens/s of a reference GPT in fp32 and bf16 autocast, the
machine's matmul rate measured in the same run, and model FLOP/s as a fraction of it.

Model FLOPs per token follow Chowdhery et al. 2022 (PaLM), appendix B:
6 N + 12 L d T, where N counts the parameters that multiply activations (every
parameter except the learned position table, which is only looked up; the tied
embedding counts once, as the output projection), L layers, d = d_model and T the
sequence length (attention scores and values, forward and backward, counted as
full even though causal attention could skip half). ``fraction_of_matmul`` divides
model FLOP/s by the rate of one large square matmul of the same precision: the
share of the machine's practical peak that training reaches.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..base.numbers import check_number
from .devices import sync
from .results import check_model_args, write_rows
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

FIELDS = ["kind", "precision", "device", "threads", "params", "flops_per_token", "step_ms", "tokens_per_s",
          "model_gflops", "matmul_gflops", "fraction_of_matmul", "steps", "d_model", "n_layers", "seq_len",
          "batch"]


@dataclass
class Settings:
    """`tfamily bench train`."""
    d_model: int = setting(256, flag=True, lo=0)
    layers: int = setting(6, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    seq_len: int = setting(256, flag=True, lo=0)
    batch: int = setting(16, flag=True, lo=0)
    vocab: int = setting(256, flag=True, lo=0)
    precisions: list[str] = setting(["fp32", "bf16"], flag=True, choices=("fp32", "bf16"))
    min_time: float = setting(8.0, flag=True, help="seconds of timed steps per precision (at least 2 steps)")
    matmul_size: int = setting(1024, flag=True, lo=0)
    device: str = setting("auto", flag=True)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/bench/train", flag=True, help="directory for train.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def matmul_gflops(n: int, dtype: torch.dtype, device: torch.device, min_time: float = 1.0) -> float:
    """Rate of an (n x n) @ (n x n) matmul: 2 n^3 FLOPs each, best of repeated timing."""
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    a @ b
    sync(device)
    reps, t0 = 0, time.perf_counter()
    while reps < 2 or time.perf_counter() - t0 < min_time:
        a @ b
        reps += 1
        sync(device)
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9


def flops_per_token(model: torch.nn.Module, n_layers: int, d_model: int, seq_len: int) -> int:
    lookup = sum(p.numel() for name, p in model.named_parameters() if name.startswith("position."))
    n = sum(p.numel() for p in model.parameters()) - lookup
    return 6 * n + 12 * n_layers * d_model * seq_len


def train_rate(args, precision: str, device: torch.device) -> dict:
    from .. import members
    from ..build import build
    from ..train.device import autocast
    from ..train.optim import adamw
    torch.manual_seed(0)
    spec = members.gpt(d_model=args.d_model, vocab_size=args.vocab, dropout=0.0, heads=dict(n_heads=args.heads),
                       depth=dict(n_layers=args.layers), position=dict(max_len=args.seq_len))
    model = build(spec).to(device)
    opt = adamw(model, 1e-4, 0.1)
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len), device=device)
    batch = {"x": x, "y": x.roll(-1, dims=1)}

    def step() -> None:
        with autocast(device, precision):
            loss, _ = model.loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up: allocations, kernels, lazy optimiser state
    sync(device)
    steps, t0 = 0, time.perf_counter()
    while steps < 2 or time.perf_counter() - t0 < args.min_time:
        step()
        steps += 1
        sync(device)
    dt = (time.perf_counter() - t0) / steps
    fpt = flops_per_token(model, args.layers, args.d_model, args.seq_len)
    tps = args.batch * args.seq_len / dt
    return {"params": sum(p.numel() for p in model.parameters()), "flops_per_token": fpt, "step_ms": dt * 1e3,
            "tokens_per_s": tps, "model_gflops": fpt * tps / 1e9, "steps": steps}


def run(args) -> int:
    from ..train.device import resolve_device
    check_model_args(args, ("d_model", "layers", "heads", "seq_len", "batch", "vocab", "matmul_size"))
    check_number("--min-time", args.min_time, 0.0, lo_open=True,
                 hint="seconds of timed steps per precision, e.g. --min-time 8")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    common = {"device": str(device), "threads": torch.get_num_threads(), "d_model": args.d_model,
              "n_layers": args.layers, "seq_len": args.seq_len, "batch": args.batch}
    rows = []
    for prec in args.precisions:
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        mm = matmul_gflops(args.matmul_size, dtype, device, min_time=min(1.0, args.min_time))
        rows.append({"kind": "matmul", "precision": prec, "matmul_gflops": mm, **common})
        tr = train_rate(args, prec, device)
        rows.append({"kind": "train", "precision": prec, "matmul_gflops": mm,
                     "fraction_of_matmul": tr["model_gflops"] / mm, **tr, **common})
    out = write_rows(args.out, "train", rows, FIELDS)
    plot(rows, out / "train.png")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            if r["kind"] == "train":
                print(f"{r['precision']:>5}: {r['tokens_per_s']:9.0f} tokens/s  {r['model_gflops']:7.1f} GFLOP/s "
                      f"model = {100 * r['fraction_of_matmul']:5.1f}% of matmul {r['matmul_gflops']:.1f} GFLOP/s")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    train = [r for r in rows if r["kind"] == "train"]
    names = [r["precision"] for r in train]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    axes[0].bar(names, [r["tokens_per_s"] for r in train], color=["tab:blue", "tab:orange"][: len(train)])
    axes[0].set_ylabel("training tokens/s")
    axes[1].bar(names, [r["model_gflops"] for r in train], label="model FLOP/s", color="tab:green")
    axes[1].bar(names, [r["matmul_gflops"] for r in train], label="matmul rate", fill=False, edgecolor="black")
    axes[1].set_ylabel("GFLOP/s")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=8)
    if train:
        r = train[0]
        fig.suptitle(f"GPT d{r['d_model']} x {r['n_layers']} layers, seq {r['seq_len']}, batch {r['batch']} "
                     f"on {r['device']} ({r['threads']} threads)", fontsize=10)
    save_figure(fig, path, dpi=110)
