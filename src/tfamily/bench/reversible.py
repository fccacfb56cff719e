"""Peak training memory against depth: reversible vs standard (and checkpointed) stacks.

`tfamily bench reversible --json` trains a decoder LM (pre-norm, dense causal SDPA by
default, or ``--kernel lsh``) for two AdamW steps at each depth and stack kind, each in a
fresh process started with the allocator set up for measuring (bench/procmem.py), on the
CPU or with ``--device cuda`` on the GPU (memory from ``torch.cuda.max_memory_allocated``,
time between CUDA events: bench/devices.py). The
first step allocates gradients and optimiser state; the second is
measured. ``activation_mb`` is the resident memory the second step adds above what is
resident before it (parameters, gradients and AdamW moments are already there), i.e. peak
training memory minus parameters, gradients and optimiser state (bench/procmem.py).
``peak_train_mb`` adds back 4 x the parameter bytes (weights, grads, two moments).
Target: reversible activation memory at 24 layers <= 1.25 x its 2-layer value, while the
standard stack's grows about linearly (Kitaev et al. 2020, section 3: a reversible stack stores
activations once, not once per layer).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .devices import DEVICE_HELP, DEVICES, meter, resolve
from .procmem import run_worker, worker_env
from .results import write_rows
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

KINDS = {"reversible": {"depth.name": "reversible"},
         "standard": {"depth.name": "stack"},
         "checkpointed": {"depth.name": "stack", "depth.checkpointing": True}}
FIELDS = ["kind", "n_layers", "activation_mb", "peak_train_mb", "param_mb", "step_ms", "seq_len", "batch",
          "d_model", "kernel", "device"]


@dataclass
class Settings:
    """`tfamily bench reversible`."""
    depths: list[int] = setting([2, 4, 8, 12, 16, 24], flag=True)
    kinds: list[str] = setting(["reversible", "standard"], flag=True, choices=list(KINDS))
    seq_len: int = setting(1024, flag=True, lo=0)
    batch: int = setting(4, flag=True, lo=0)
    d_model: int = setting(256, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    kernel: str = setting("sdpa", flag=True, choices=("sdpa", "lsh"),
                          help="lsh: shared-QK LSH attention (2 rounds, buckets of 64), as in the reformer member")
    ff_chunks: int = setting(1, flag=True, lo=0)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    device: str = setting("cpu", flag=True, choices=DEVICES, help=DEVICE_HELP)
    out: str = setting("runs/bench/reversible", flag=True, help="directory for reversible.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")
    worker: str | None = setting(None, flag=True, help=argparse.SUPPRESS)


def add_args(p) -> None:
    add_flags(p, Settings)


def run(args) -> int:
    if args.worker:
        print(json.dumps(_measure(args)))
        return 0
    bad = [d for d in args.depths if d < 1]
    if bad:
        raise ValueError(f"--depths must be positive, got {bad}")
    for name in ("seq_len", "batch", "d_model", "heads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    resolve(args.device)  # refuse a missing GPU before spawning anything
    rows = []
    for kind in args.kinds:
        for n in args.depths:
            rows.append(_spawn(args, kind, n))
            print(f"# {kind} n_layers={n}: {rows[-1]['activation_mb']} MiB", file=sys.stderr, flush=True)
    for kind in args.kinds:
        rs = {r["n_layers"]: r["activation_mb"] for r in rows if r["kind"] == kind}
        lo = rs[min(rs)]
        for r in rows:
            if r["kind"] == kind:
                r["vs_shallowest"] = round(r["activation_mb"] / lo, 3) if lo else None
    out = write_rows(args.out, "reversible", rows, FIELDS + ["vs_shallowest"])
    _plot(rows, out / "reversible.png")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(" ".join(f"{k}={r.get(k)}" for k in FIELDS[:6] + ["vs_shallowest"]))
    return 0


def _spawn(args, kind: str, n_layers: int) -> dict:
    cmd = [sys.executable, "-m", "tfamily.bench.reversible", "--worker", kind, "--depths", str(n_layers),
           "--seq-len", str(args.seq_len), "--batch", str(args.batch), "--d-model", str(args.d_model),
           "--heads", str(args.heads), "--kernel", args.kernel, "--ff-chunks", str(args.ff_chunks),
           "--threads", str(args.threads), "--device", args.device]
    return run_worker(cmd, f"bench reversible worker {kind} n_layers={n_layers}", worker_env())


def model_spec(args, kind: str, n_layers: int):
    from ..spec import Spec

    overrides = {"depth.n_layers": n_layers, **KINDS[kind]}
    if args.kernel == "lsh":
        overrides.update({"kernel": {"name": "lsh", "params": {"n_hashes": 2, "bucket_size": 64}},
                          "heads.shared_qk": True})
    base = Spec(member=f"bench_{kind}", vocab_size=256, d_model=args.d_model, dropout=0.1,
                pattern={"name": "causal"}, position={"name": "sinusoidal"},
                heads={"n_heads": args.heads}, residual={"name": "pre_norm"},
                ff={"activation": "gelu", "chunks": args.ff_chunks})
    return base.override(overrides)


def _measure(args) -> dict:
    import torch

    from ..build import build

    if args.threads:
        torch.set_num_threads(args.threads)
    kind, n_layers, dev = args.worker, args.depths[0], resolve(args.device)
    torch.manual_seed(0)
    model = build(model_spec(args, kind, n_layers)).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 256, (args.batch, args.seq_len), device=dev)
    batch = {"x": x, "y": x.roll(-1, dims=1)}

    def step():
        loss, _ = model.loss(batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # keep the gradient buffers: they are not activations

    m = meter(dev)
    _, first = m.seconds(step)  # allocates gradients and AdamW state
    (_, act, exact), step_s = m.seconds(lambda: m.peak_mb(step))
    param_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2 ** 20
    return {"kind": kind, "n_layers": n_layers, "activation_mb": round(act, 1),
            "peak_train_mb": round(act + 4 * param_mb, 1), "param_mb": round(param_mb, 1),
            "step_ms": round(min(first, step_s) * 1e3, 1), "peak_exact": exact,
            "seq_len": args.seq_len, "batch": args.batch, "d_model": args.d_model, "kernel": args.kernel,
            "device": dev.type}


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["n_layers"])
        ax.plot([r["n_layers"] for r in rs], [r["activation_mb"] for r in rs], "o-", label=kind)
    ax.set_xlabel("layers")
    ax.set_ylabel("activation memory of a training step (MiB)")
    ax.set_title("Peak training memory minus params, grads, AdamW state")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":  # the same as `tfamily bench reversible`
    from ..cli import main
    sys.exit(main(["bench", "reversible", *sys.argv[1:]]))
