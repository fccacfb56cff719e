"""LSH attention against dense SDPA: forward + backward time and peak memory vs length.

`tfamily bench lsh --json` times one attention call (b, h, L, e) forward and backward, on the CPU
or with ``--device cuda`` on the GPU (time between CUDA events, memory from
``torch.cuda.max_memory_allocated``: bench/devices.py):
the Reformer's shared-QK LSH attention (kernel "lsh": hashing, sorting, chunked
attention; 1, 2, 4, 8 rounds) and dense causal SDPA (the flash kernel with
``is_causal``, which skips masked blocks: the strongest dense baseline on CPU). Every
configuration runs in two fresh processes: one times a warm-up call and ``--repeats``
calls (the fastest is kept); the other, with the allocator set up for measuring
(bench/procmem.py), runs a warm-up call and then one call whose peak memory is the
resident memory it added above the inputs. Dense attention is measured up to
``--max-dense-len``; at longer lengths its time is extrapolated with the L^2 law
(t = a L^2, a fitted by least squares on the measured lengths >= 1/4 of the longest),
and the row says so
(``extrapolated: true``, memory null). ``speedup`` = dense time / LSH time at that length.

Peer (``--peer hf``, the default when ``transformers`` is installed: ``pip install -e '.[peers]'``):
Hugging Face's ``LSHSelfAttention`` (the Reformer's LSH layer: shared-QK and value projections,
hashing, chunked causal attention) against the same layer built from ours (two bias-free
linear maps, keys = normalised queries, kernel "lsh"), same heads, head size, chunk length,
bucket count and rounds, forward + backward w.r.t. input and weights. Both run in one process,
alternating call by call (``--peer-repeats`` timed calls each after a warm-up); the row gives
the fastest of each and ``hf_over_ours``. Ours does more per call: it restricts attention to the
query's own bucket and counts keys seen in several rounds once (the paper); HF attends every
key of the chunk window (our ``same_bucket_only=False``) and counts repeats again. Without
``transformers`` the peer rows are skipped with a one-line note. Every row says whether ours ran
the compiled tile kernel (``compiled``; ``TFAMILY_NATIVE=0`` times the PyTorch path).
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

FIELDS = ["kind", "n_hashes", "seq_len", "fwd_bwd_ms", "peak_mb", "speedup", "extrapolated", "batch", "heads",
          "d_head", "bucket_size", "threads", "ours_ms", "hf_ms", "hf_over_ours", "peer_version", "compiled", "device"]


@dataclass
class Settings:
    """`tfamily bench lsh`."""
    lengths: list[int] = setting([1024, 4096, 16384, 65536], flag=True)
    rounds: list[int] = setting([1, 2, 4, 8], flag=True, help="LSH hash rounds")
    bucket_size: int = setting(64, flag=True, lo=0, help="average bucket size = chunk length")
    batch: int = setting(1, flag=True, lo=0)
    heads: int = setting(8, flag=True, lo=0)
    d_head: int = setting(64, flag=True, lo=0)
    max_dense_len: int = setting(16384, flag=True, lo=0,
                                 help="longest length at which dense SDPA is run; longer ones are extrapolated")
    repeats: int = setting(1, flag=True, lo=0, help="timed calls after the measured first one")
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    device: str = setting("cpu", flag=True, choices=DEVICES, help=DEVICE_HELP)
    peer: str = setting("hf", flag=True, choices=("hf", "none"),
                        help="hf: also time Hugging Face's LSHSelfAttention against ours (needs transformers)")
    peer_lengths: list[int] | None = setting(None, flag=True,
                                             help="lengths for the peer rows (default: --lengths up to 16384)")
    peer_repeats: int = setting(3, flag=True, lo=0, help="timed calls of each layer, alternating")
    out: str = setting("runs/bench/lsh", flag=True, help="directory for lsh.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")
    worker: str | None = setting(None, flag=True, help=argparse.SUPPRESS)
    measure: str = setting("time", flag=True, choices=("time", "memory"), help=argparse.SUPPRESS)


def add_args(p) -> None:
    add_flags(p, Settings)


def run(args) -> int:
    if args.worker:
        print(json.dumps(_measure(args)))
        return 0
    for name in ("lengths", "rounds", "bucket_size", "batch", "heads", "d_head"):
        values = getattr(args, name)
        bad = [v for v in (values if isinstance(values, list) else [values]) if v < 1]
        if bad:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {bad}")
    resolve(args.device)  # refuse a missing GPU before spawning anything
    rows = []
    for L in args.lengths:
        if L <= args.max_dense_len:
            rows.append(_spawn(args, "dense_sdpa", L, 0))
        for r in args.rounds:
            rows.append(_spawn(args, "lsh", L, r))
        print(f"# L={L}: done", file=sys.stderr, flush=True)
    _add_dense_extrapolation(rows, args)
    rows += _peer_rows(args)
    out = write_rows(args.out, "lsh", rows, FIELDS)
    _plot(rows, out / "lsh.png")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            keys = FIELDS[:3] + (["ours_ms", "hf_ms", "hf_over_ours"] if r["kind"] == "peer" else FIELDS[3:7])
            print(" ".join(f"{k}={r.get(k)}" for k in keys))
    return 0


def _peer_rows(args) -> list[dict]:
    if args.peer == "none":
        return []
    try:
        import transformers
    except ImportError:
        print("# peer rows skipped: transformers is not installed (pip install -e '.[peers]')",
              file=sys.stderr, flush=True)
        return []
    lengths = args.peer_lengths or [L for L in args.lengths if L <= 16384]
    rows = []
    for L in lengths:
        for r in args.rounds:
            row = _spawn(args, "peer", L, r, measures=("time",))
            rows.append(row | {"peer_version": f"transformers {transformers.__version__}"})
        print(f"# peer L={L}: done", file=sys.stderr, flush=True)
    return rows


def _spawn(args, kind: str, L: int, rounds: int, measures=("time", "memory")) -> dict:
    cmd = [sys.executable, "-m", "tfamily.bench.lsh", "--worker", kind, "--lengths", str(L),
           "--rounds", str(max(rounds, 1)), "--bucket-size", str(args.bucket_size), "--batch", str(args.batch),
           "--heads", str(args.heads), "--d-head", str(args.d_head), "--repeats", str(args.repeats),
           "--threads", str(args.threads), "--peer-repeats", str(args.peer_repeats), "--device", args.device]
    row = {}
    for measure, env in (("time", None), ("memory", worker_env())):
        if measure not in measures:
            continue
        row.update(run_worker(cmd + ["--measure", measure], f"bench lsh worker {kind} L={L} ({measure})", env))
    return row


def _measure(args) -> dict:
    import torch
    import torch.nn.functional as F

    from ..nn.kernels.lsh import LSHKernel
    from ..nn.patterns import Causal

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = resolve(args.device)
    _compiled(dev)  # load (or build) the compiled kernels before anything is timed
    if args.worker == "peer":
        return _measure_peer(args, dev)
    L, rounds = args.lengths[0], args.rounds[0]
    b, h, e = args.batch, args.heads, args.d_head
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, L, e, device=dev, requires_grad=True) for _ in range(3))
    kernel = LSHKernel(n_hashes=rounds, bucket_size=args.bucket_size)

    def step():
        if args.worker == "lsh":  # shared QK: keys are the normalised queries
            out, _ = kernel(q, F.normalize(q, dim=-1), v, pattern=Causal())
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()

    meta = {"kind": args.worker, "n_hashes": rounds if args.worker == "lsh" else None, "seq_len": L,
            "extrapolated": False, "batch": b, "heads": h, "d_head": e,
            "bucket_size": args.bucket_size if args.worker == "lsh" else None, "device": dev.type}
    m = meter(dev)
    if args.measure == "memory":
        step()  # warm-up: one-time allocations (thread pools, lazy init) are not the call's
        q.grad = k.grad = v.grad = None  # the measured call starts from the inputs alone
        _, peak, exact = m.peak_mb(step)
        return {**meta, "peak_mb": round(peak, 1), "peak_exact": exact}
    times = []
    for _ in range(1 + args.repeats):  # the first call warms up
        q.grad = k.grad = v.grad = None
        times.append(m.seconds(step)[1])
    best = min(times[1:]) if args.repeats else times[0]
    return {**meta, "fwd_bwd_ms": round(best * 1e3, 1), "threads": torch.get_num_threads(), **_compiled(dev)}


def _measure_peer(args, dev) -> dict:
    """Ours and HF's LSH layer (projections + attention), alternating call by call."""
    import torch
    import torch.nn.functional as F
    from transformers.models.reformer.modeling_reformer import LSHSelfAttention, ReformerConfig

    from ..nn.kernels.lsh import LSHKernel
    from ..nn.patterns import Causal

    L, rounds = args.lengths[0], args.rounds[0]
    b, h, e, c = args.batch, args.heads, args.d_head, args.bucket_size
    kernel = LSHKernel(n_hashes=rounds, bucket_size=c)
    cfg = ReformerConfig(hidden_size=h * e, num_attention_heads=h, attention_head_size=e, num_hashes=rounds,
                         lsh_attn_chunk_length=c, num_buckets=kernel.buckets_for(L), lsh_num_chunks_before=1,
                         lsh_num_chunks_after=0, is_decoder=True, lsh_attention_probs_dropout_prob=0.0,
                         attn_layers=["lsh"])
    torch.manual_seed(0)
    hf = LSHSelfAttention(cfg).to(dev).train()
    qk = torch.nn.Linear(h * e, h * e, bias=False, device=dev)
    val = torch.nn.Linear(h * e, h * e, bias=False, device=dev)
    x = torch.randn(b, L, h * e, device=dev, requires_grad=True)

    def ours():
        q = qk(x).view(b, L, h, e).transpose(1, 2)
        v = val(x).view(b, L, h, e).transpose(1, 2)
        out, _ = kernel(q, F.normalize(q, dim=-1), v, pattern=Causal())
        return out.transpose(1, 2).reshape(b, L, h * e)

    times, m = {"ours": [], "hf": []}, meter(dev)
    for i in range(1 + args.peer_repeats):  # the first round warms both up
        for name, fn in (("ours", ours), ("hf", lambda: hf(x).hidden_states)):
            x.grad = None
            _, s = m.seconds(lambda: fn().sum().backward())
            if i:
                times[name].append(s)
    best = {k: min(v) * 1e3 for k, v in times.items()}
    return {"kind": "peer", "n_hashes": rounds, "seq_len": L, "batch": b, "heads": h, "d_head": e,
            "bucket_size": c, "threads": torch.get_num_threads(), "extrapolated": False,
            "ours_ms": round(best["ours"], 1), "hf_ms": round(best["hf"], 1),
            "hf_over_ours": round(best["hf"] / best["ours"], 2), "device": dev.type, **_compiled(dev)}


def _compiled(dev) -> dict:
    """Whether our LSH ran its compiled tile kernel (nn/kernels/native.py, CPU only) or the
    PyTorch path."""
    from ..nn.kernels import native

    return {"compiled": dev.type == "cpu" and native.ops() is not None}


def _add_dense_extrapolation(rows: list[dict], args) -> None:
    dense = sorted((r for r in rows if r["kind"] == "dense_sdpa"), key=lambda r: r["seq_len"])
    # Least squares for t = a L^2: a = sum(t L^2) / sum(L^4), dominated by the longest
    # lengths, where the quadratic term dominates the fixed costs.
    fit = [r for r in dense if r["seq_len"] >= dense[-1]["seq_len"] // 4] if dense else []
    a = (sum(r["fwd_bwd_ms"] * r["seq_len"] ** 2 for r in fit) / sum(r["seq_len"] ** 4 for r in fit)
         if fit else None)
    for L in args.lengths:
        if L > args.max_dense_len and a is not None:
            rows.append({"kind": "dense_sdpa", "n_hashes": None, "seq_len": L,
                         "fwd_bwd_ms": round(a * L * L, 1), "peak_mb": None, "extrapolated": True,
                         "note": f"t = a L^2 fitted on L = {[r['seq_len'] for r in fit]} (measured)",
                         "batch": args.batch, "heads": args.heads, "d_head": args.d_head,
                         "bucket_size": None, "threads": fit[-1]["threads"]})
    base = {r["seq_len"]: r["fwd_bwd_ms"] for r in rows if r["kind"] == "dense_sdpa"}
    for r in rows:
        if r["kind"] == "lsh" and r["seq_len"] in base:
            r["speedup"] = round(base[r["seq_len"]] / r["fwd_bwd_ms"], 2)


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    series = {}
    for r in (r for r in rows if r["kind"] != "peer"):
        name = "dense SDPA (causal)" if r["kind"] == "dense_sdpa" else f"LSH-{r['n_hashes']}"
        series.setdefault(name, []).append(r)
    for name, rs in series.items():
        rs = sorted(rs, key=lambda r: r["seq_len"])
        meas = [r for r in rs if not r["extrapolated"]]
        line, = ax_t.plot([r["seq_len"] for r in meas], [r["fwd_bwd_ms"] / 1e3 for r in meas], "o-", label=name)
        extra = [meas[-1]] + [r for r in rs if r["extrapolated"]] if meas else []
        if len(extra) > 1:
            ax_t.plot([r["seq_len"] for r in extra], [r["fwd_bwd_ms"] / 1e3 for r in extra], "--",
                      color=line.get_color(), label=f"{name} (L^2 extrapolation)")
        mem = [r for r in meas if r["peak_mb"] is not None]
        ax_m.plot([r["seq_len"] for r in mem], [r["peak_mb"] for r in mem], "o-", label=name)
    for ax, label in ((ax_t, "forward + backward (s)"), (ax_m, "peak memory above inputs (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=7)
    fig.suptitle(f"LSH attention vs dense SDPA, {rows[0]['device']}")
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":  # the same as `tfamily bench lsh`
    from ..cli import main
    sys.exit(main(["bench", "lsh", *sys.argv[1:]]))
