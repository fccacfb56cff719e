"""Attention cost against sequence length for every sparse pattern and dense causal SDPA.

`tfamily bench attention --json --plot FILE` times forward (no grad) and forward +
backward of one attention call (b, h, L, e) for each pattern in the catalogue
(nn/patterns/examples.py) with a block-sparse kernel, and dense causal SDPA
(``is_causal``) as the yardstick. Each pattern runs in a fresh process so its peak
memory is that process's peak resident memory above its start (inputs included).

Density is the fraction of the L x L score matrix a pattern allows (averaged over
heads); ``causal_density`` the same over the L (L + 1) / 2 causal pairs, i.e. the
fraction of dense causal work. ``vs_target`` = fwd_bwd_ms / (causal_density x
dense_fwd_bwd_ms), where ``dense_fwd_bwd_ms`` is dense causal SDPA timed in the same
worker in alternating rounds with the pattern (steadier than a separate run on a shared
machine); ``vs_target_best_dense`` uses the fastest dense time of the whole run instead
(the conservative ratio, ``add_ratios``). The issue's target is <= 1.5 at L = 16K. Times
are the fastest of a few rounds, the leaves' gradients cleared before each.

Workers run with ``THP_MEM_ALLOC_ENABLE=1`` (unless the variable is set): PyTorch then
asks for transparent huge pages for large CPU tensors. On the 2-core development VM,
first-touch of fresh memory ran at 1.7 GB/s without them and 7.5 GB/s with them
(warm memory: 12 GB/s), which otherwise dominates any kernel that allocates.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .procmem import run_worker
from .results import write_rows
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

BASELINE = "dense_causal_sdpa"
TILED_CAUSAL = "causal_tiles"  # dense causal through the block-sparse tiles (opt-in by name)
FIELDS = ["pattern", "kernel", "impl", "seq_len", "density", "causal_density", "fwd_ms", "fwd_bwd_ms", "peak_mb",
          "plan_ms", "dense_fwd_bwd_ms", "vs_target", "dense_best_ms", "vs_target_best_dense", "batch", "heads", "d_head", "block_size", "device", "dtype"]


def _block(text: str):
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a tile size; use an integer >= 1 such as 64, or auto")
    return int(text)


@dataclass
class Settings:
    """`tfamily bench attention`."""
    seq_lens: list[int] = setting([1024, 2048, 4096, 8192, 16384], flag=True)
    patterns: list[str] | None = setting(None, flag=True, nargs="*",
                                         help=f"catalogue names (default: all but causal), or {TILED_CAUSAL}: dense "
                                              "causal through the kernel's own tiles")
    kernel: str = setting("blocksparse", flag=True, choices=("blocksparse", "flex"),
                          help="flex is forward-only on CPU (fwd_bwd_ms is then null)")
    block_size: int | str = setting("auto", flag=True, parse=_block, words=("auto",),
                                    help="tile size, or 'auto' (blocksparse picks one per pattern, length and "
                                         "dtype by modelled cost: nn/kernels/layout.py)")
    batch: int = setting(1, flag=True, lo=0)
    heads: int = setting(8, flag=True, lo=0)
    d_head: int = setting(64, flag=True, lo=0)
    device: str = setting("cpu", flag=True)
    dtype: str = setting("float32", flag=True, choices=("float32", "bfloat16"),
                         help="q, k, v and SDPA's dtype (bf16 runs the bf16 tile kernel where the CPU has bf16 "
                              "instructions, see fused_blocks.bf16_tiles)")
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    rounds: int = setting(0, flag=True, lo=0,
                          help="timed calls per cell, alternating pattern and dense SDPA (0: 3-5 by length)")
    out: str = setting("runs/bench/attention", flag=True, help="directory for attention.json/.csv")
    plot: str | None = setting(None, flag=True, help="PNG path (default OUT/attention.png)")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")
    worker: str | None = setting(None, flag=True, help=argparse.SUPPRESS)


def add_args(p) -> None:
    add_flags(p, Settings)


def run(args) -> int:
    if args.rounds < 0:
        raise ValueError(f"--rounds must be >= 0 (0: 3-5 by length), got {args.rounds}")
    for name in ("seq_lens", "batch", "heads", "d_head"):
        values = getattr(args, name)
        if any(v < 1 for v in (values if isinstance(values, list) else [values])):
            raise ValueError(f"--{name.replace('_', '-')} must be integers >= 1, got {values}")
    if args.worker:
        return _worker(args)
    from ..nn.patterns.examples import examples
    # "causal" is left out by default: both kernels hand it to fused SDPA (the baseline itself).
    names = args.patterns if args.patterns is not None else [n for n in examples(1024) if n != "causal"]
    unknown = sorted(set(names) - set(examples(1024)) - {TILED_CAUSAL})
    if unknown:
        raise ValueError(f"unknown pattern(s) {unknown}; choose from {', '.join(examples(1024))}")
    rows = []
    for name in [BASELINE] + names:
        rows += _spawn(name, args)
        print(f"# {name}: done", file=sys.stderr, flush=True)
    add_ratios(rows)
    out = write_rows(args.out, "attention", rows, FIELDS)
    plot(rows, Path(args.plot) if args.plot else out / "attention.png")
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _table(rows)
    return 0


def add_ratios(rows: list[dict]) -> None:
    """``vs_target`` against the dense time of the row's own worker; ``vs_target_best_dense``
    against the fastest dense time any worker measured at that length and dtype. Other load only
    ever adds time, so the second is the conservative ratio: a worker whose dense call was slowed
    cannot flatter its pattern (fp32 SDPA at 16K took 4.4-6.7 s across the workers of one run)."""
    best: dict = {}
    for r in rows:
        if r.get("dense_fwd_bwd_ms"):
            key = (r["seq_len"], r.get("dtype"))
            best[key] = min(best.get(key, float("inf")), r["dense_fwd_bwd_ms"])
    for r in rows:
        ok = r["fwd_bwd_ms"] is not None and r["dense_fwd_bwd_ms"]
        r["vs_target"] = round(r["fwd_bwd_ms"] / (r["causal_density"] * r["dense_fwd_bwd_ms"]), 3) if ok else None
        fastest = best.get((r["seq_len"], r.get("dtype")))
        r["dense_best_ms"] = fastest
        r["vs_target_best_dense"] = (round(r["fwd_bwd_ms"] / (r["causal_density"] * fastest), 3)
                                     if ok and fastest else None)


def _spawn(name: str, args) -> list[dict]:
    cmd = [sys.executable, "-m", "tfamily.bench.attention", "--worker", name, "--seq-lens",
           *map(str, args.seq_lens), "--kernel", args.kernel, "--block-size", str(args.block_size),
           "--batch", str(args.batch), "--heads", str(args.heads), "--d-head", str(args.d_head),
           "--device", args.device, "--threads", str(args.threads), "--dtype", args.dtype,
           "--rounds", str(args.rounds)]
    env = dict(os.environ, THP_MEM_ALLOC_ENABLE=os.environ.get("THP_MEM_ALLOC_ENABLE", "1"))
    return run_worker(cmd, f"benchmark worker for {name}", env, tail=3000)


def _peak_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _worker(args) -> int:
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    start = _peak_rss_mb()
    print(json.dumps([_row(args, L, dev, start) for L in sorted(args.seq_lens)]))
    return 0


def _attention(args, L: int, q, k, v, dev):
    """The worker's attention at length ``L`` as ``fn(q, k, v)``, its plan built: (fn, allowed
    (query, key) pairs, kernel name, plan ms, the tile sizes an auto kernel picked)."""
    import torch
    import torch.nn.functional as F

    from ..nn.kernels import KERNELS
    from ..nn.patterns.examples import examples
    h, e = args.heads, args.d_head
    if args.worker == BASELINE:
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        return fn, h * L * (L + 1) // 2, "sdpa", 0.0, []
    if args.worker == TILED_CAUSAL:
        # Dense causal through the block-sparse kernel itself (the kernel hands the plain
        # causal pattern to SDPA; this row measures what its own tiles cost on it).
        from ..nn.kernels.blocksparse import sparse_attention
        from ..nn.patterns import Causal
        ctx = dict(q_offset=0, key_padding=None, dropout_p=0.0, scale=e ** -0.5, block=args.block_size)
        fn = lambda q, k, v: sparse_attention(q, k, v, Causal(), tuple(range(h)), None, ctx)  # noqa: E731
        with torch.no_grad():
            fn(q, k, v)
        return fn, h * L * (L + 1) // 2, args.kernel, 0.0, []
    pattern = examples(L)[args.worker]
    if args.kernel == "flex" and args.block_size == "auto":
        args.block_size = 128  # flex needs one tile size for its compiled kernel
    kernel = KERNELS[args.kernel](block_size=args.block_size)
    fn = lambda q, k, v: kernel(q, k, v, pattern=pattern)[0]  # noqa: E731
    t0 = time.perf_counter()
    with torch.no_grad():
        fn(q, k, v)  # builds and caches the plan
    plan_ms = (time.perf_counter() - t0) * 1e3
    from ..nn.kernels.layout import _BEST
    # The kernel's picks, read before allowed_pairs plans with the gather path's cost model.
    tiles = sorted({b for key, b in _BEST.items() if key[2] == L}) if args.block_size == "auto" else []
    return fn, allowed_pairs(pattern, L, h, args.block_size, dev), args.kernel, plan_ms, tiles


def _row(args, L: int, dev, start: float) -> dict:
    """One length's row: forward, forward+backward and dense causal in alternating rounds, peak memory."""
    import torch
    import torch.nn.functional as F
    cuda = dev.type == "cuda"
    b, h, e = args.batch, args.heads, args.d_head
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(b, h, L, e, device=dev, dtype=dtype) for _ in range(3))
    grad = torch.randn(b, h, L, e, device=dev, dtype=dtype)
    fn, allowed, kernel_name, plan_ms, tiles = _attention(args, L, q, k, v, dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    # At least 3 timed calls even at 16K+: one call there moved by up to 2x on a shared VM
    # (strided_heads fp32: 289 ms in one call, 151 ms best of 3, same session).
    reps = args.rounds or max(3, min(5, 8192 // L))
    with torch.no_grad():
        fwd = _time(lambda: fn(q, k, v), reps, cuda)
    trainable = not (args.kernel == "flex" and dev.type == "cpu" and args.worker != BASELINE)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    timed = {}
    if trainable:
        timed["pattern"] = lambda: fn(qg, kg, vg).backward(grad)
    if args.worker != BASELINE:
        # Dense causal in the same process, in alternating rounds with the pattern: a slow
        # spell on a shared machine then hits both, not one of the two.
        timed["dense"] = lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True).backward(grad)
    # Gradients are cleared before each timed call, as a training step's zero_grad does: else
    # every call after the first also adds its dq, dk, dv into the leaves' .grad, three passes
    # over (b, h, L, e) that are no part of attention.
    best = _time_alternating(timed, reps, cuda, warm=L <= 4096, reset=lambda: _clear_grads(qg, kg, vg))
    fwd_bwd, dense = best.get("pattern"), best.get("dense")
    peak = (torch.cuda.max_memory_allocated(dev) / 2 ** 20 if cuda else _peak_rss_mb() - start)
    return dict(pattern=args.worker, kernel=kernel_name, impl=_impl(args, q), seq_len=L,
                density=round(allowed / (h * L * L), 5),
                causal_density=round(allowed / (h * L * (L + 1) / 2), 5), fwd_ms=round(fwd, 2),
                fwd_bwd_ms=None if fwd_bwd is None else round(fwd_bwd, 2), peak_mb=round(peak, 1),
                dense_fwd_bwd_ms=round(dense if dense is not None else fwd_bwd, 2),
                plan_ms=round(plan_ms, 1), batch=b, heads=h, d_head=e,
                block_size="+".join(map(str, tiles)) if tiles else args.block_size,
                device=str(dev), dtype=args.dtype)


def _impl(args, q) -> str:
    """Which code ran: the compiled block-sparse kernel, its PyTorch path, or another kernel."""
    if args.worker == BASELINE:
        return "sdpa"
    if args.kernel != "blocksparse":
        return args.kernel
    import torch

    from ..nn.kernels import fused_blocks
    if fused_blocks.usable(q) is None:
        return "pytorch"
    return "compiled-bf16" if q.dtype == torch.bfloat16 and fused_blocks.bf16_tiles() else "compiled"


def _time_alternating(fns: dict, reps: int, cuda: bool, warm: bool = True, reset=None) -> dict:
    """Fastest of ``reps`` alternating rounds of each function (one call of each per round);
    ``reset``, if given, runs untimed before every call."""
    import torch
    if warm:
        for fn in fns.values():
            fn()
    times: dict = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if reset is not None:
                reset()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    return {name: min(t) * 1e3 for name, t in times.items()}


def _clear_grads(*leaves) -> None:
    for t in leaves:
        t.grad = None


def _time(fn, reps: int, cuda: bool, warm: bool = True) -> float:
    """Fastest of ``reps`` runs after a warm-up: other load only ever adds time."""
    return _time_alternating({"fn": fn}, reps, cuda, warm)["fn"]


def allowed_pairs(pattern, L: int, n_heads: int, block, device) -> int:
    """Allowed (head, query, key) triples, counted from the cached plans (exact, no L x L)."""
    return plan_total(pattern, L, n_heads, block, device, lambda plan: sum(bk.allowed for bk in plan.buckets))


def visited_tiles(pattern, L: int, n_heads: int, block, device) -> int:
    """(head, query tile, key tile) triples the block-sparse kernels compute: every live tile entry."""
    return plan_total(pattern, L, n_heads, block, device, lambda plan: sum(int(bk.live.sum()) for bk in plan.buckets))


def plan_total(pattern, L: int, n_heads: int, block, device, measure) -> int:
    """``measure(plan)`` summed over the plans the kernels run for ``pattern`` (each head group of a
    per-head pattern, each softmax group of a union), a layout shared by all heads counted per head.
    The plans are the kernels' own cached ones."""
    from ..nn.kernels.layout import get_plan, split
    from ..nn.patterns import PerHead
    from ..nn.patterns.combine import is_per_head

    def count(p, heads):
        if isinstance(p, PerHead):
            return sum(count(sub, tuple(x for x in heads if x % len(p.patterns) == i))
                       for i, sub in enumerate(p.patterns))
        total = 0
        for qo, parts in split(p):
            per = any(is_per_head(x) for x in parts)
            n = measure(get_plan(parts, qo, L, L, 0, block, heads if per else None, device))
            total += n if per else n * len(heads)
        return total
    return count(pattern, tuple(range(n_heads)))


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    names = list(dict.fromkeys(r["pattern"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    colours = plt.get_cmap("tab20").colors
    for i, name in enumerate(names):
        rs = sorted((r for r in rows if r["pattern"] == name), key=lambda r: r["seq_len"])
        style = (dict(color="black", linewidth=2.5) if name == BASELINE else
                 dict(marker="os^v"[i % 4], markersize=3, color=colours[(2 * i) % 20 + (i // 10) % 2]))
        lens = [r["seq_len"] for r in rs]
        for ax, key in zip(axes, ["fwd_bwd_ms", "peak_mb", "vs_target"]):
            pts = [(x, r[key]) for x, r in zip(lens, rs) if r.get(key) is not None and r[key] > 0]
            if pts and not (key == "vs_target" and name == BASELINE):
                ax.plot(*zip(*pts), label=name, **style)
    for ax, title in zip(axes, ["forward + backward (ms)", "peak memory (MB)",
                                "time / (causal density x dense causal time)"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[2].axhline(1.5, color="red", linestyle="--", linewidth=1, label="target 1.5")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    r0 = rows[0]
    fig.suptitle(f"attention, b={r0['batch']} h={r0['heads']} e={r0['d_head']}, {r0['device']}", fontsize=10)
    save_figure(fig, path, dpi=110)


def _table(rows: list[dict]) -> None:
    print(f"{'pattern':<24}{'L':>7}{'density':>9}{'fwd ms':>10}{'fwd+bwd ms':>12}{'peak MB':>9}{'vs target':>10}"
          f"{'vs fastest dense':>18}")
    for r in rows:
        fb = "-" if r["fwd_bwd_ms"] is None else f"{r['fwd_bwd_ms']:.1f}"
        vt = "-" if r["vs_target"] is None else f"{r['vs_target']:.2f}"
        vb = "-" if r.get("vs_target_best_dense") is None else f"{r['vs_target_best_dense']:.2f}"
        print(f"{r['pattern']:<24}{r['seq_len']:>7}{r['density']:>9.4f}{r['fwd_ms']:>10.1f}{fb:>12}"
              f"{r['peak_mb']:>9.1f}{vt:>10}{vb:>18}")


if __name__ == "__main__":  # the same as `tfamily bench attention`
    from ..cli import main
    sys.exit(main(["bench", "attention", *sys.argv[1:]]))
