"""tfamily's ``flex`` kernel against FlexAttention's floor and dense causal SDPA, per pattern.

`tfamily bench flex-floor --out DIR` times, for each catalogue pattern and length:
(a) tfamily's ``flex`` kernel; (b) the plain call a FlexAttention user writes: the same
compiled ``flex_attention`` with a ``BlockMask`` built once, outside the timing, from the
pattern's own ``mask_mod`` evaluated on every (query, key) pair (``floor_block_mask``: no
tfamily planner involved, so the two masks are derived independently and the outputs'
agreement, ``max_abs_diff``, checks both); (c) dense causal SDPA. Forward and forward +
backward, ``--warmup`` calls and then the median of ``--reps`` timed with CUDA events, and
``torch.cuda.max_memory_allocated`` for a fwd+bwd call (above what was held before it); the
outputs and, on a GPU, the q, k, v gradients of (a) and (b) are compared (``max_abs_diff``,
``grad_rel_diff``; status ``mismatch`` past the dtype's tolerance).
Visited tiles are counted for (a) from its plans, for (b) from its block mask and for (c) as
the causal triangle, so ``*_tile_vs_dense`` is time per visited tile relative to dense.

Rows run in the order of ``--seq-lens`` (16K, 4K, 64K: 16K is where the GPU targets bite:
within 1.1x of the plain call and faster than dense SDPA from 8K up; 64K is the slowest to plan
and compile), then of ``--patterns``; once ``--time`` has
passed the remaining rows are recorded as skipped. A failing kernel is recorded in its row's
``a_error``/``b_error`` and the run goes on. Rows are rewritten to DIR after each one, so a run
cut short keeps what it measured; ``flex_floor_profile.txt`` holds torch.profiler's top ops of
(a) and (b) for ``--profile`` at ``--profile-len``.

Forward times are of a training step's forward (inputs require grad): the graph that fwd+bwd
compiles anyway, so each (pattern, length) compiles once per kernel, not twice. On CPU, where
FlexAttention is forward-only, the forward runs under no_grad and (a), (b) have no fwd+bwd.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..base.options import seconds
from .attention import allowed_pairs, visited_tiles
from .flex_floor_report import one_line as _one_line
from .flex_floor_report import plot, profile, sync as _sync
from .flex_floor_report import table as _table
from .results import write_rows
from ..settings.schema import add_flags, setting

# Most informative first (the four, then the rest): rows past the budget are skipped.
PRIORITY = ("sliding_window", "bigbird", "strided_heads", "local_1d", "longformer", "fixed_heads",
            "local_2d", "sliding_window_2sided", "strided_merged", "fixed_merged")
FIELDS = ["pattern", "seq_len", "status", "density", "tiles_a", "tiles_b", "tiles_dense",
          "a_fwd_ms", "b_fwd_ms", "dense_fwd_ms", "a_fwd_bwd_ms", "b_fwd_bwd_ms", "dense_fwd_bwd_ms",
          "a_vs_b_fwd", "a_vs_b_fwd_bwd", "a_vs_dense_fwd_bwd", "a_tile_vs_dense", "b_tile_vs_dense",
          "a_fwd_host_ms", "b_fwd_host_ms", "a_peak_mb", "b_peak_mb", "dense_peak_mb", "max_abs_diff",
          "grad_rel_diff", "plan_ms", "mask_ms", "a_first_s", "b_first_s", "a_error", "b_error", "error", "batch",
          "heads", "d_head", "block_size", "dtype", "device", "gpu", "torch"]
# Query rows x keys x heads per step of floor_block_mask: its int64 temporaries stay near 512 MB.
_CHUNK = 1 << 26
# bf16 outputs of two kernels visiting the same tiles in different orders (the online softmax
# rounds differently): a few bf16 ulps of values of order 1; gradients relative to their largest.
_TOLERANCE = {"bfloat16": 3e-2, "float16": 5e-3, "float32": 1e-4}


@dataclass
class Settings:
    """`tfamily bench flex-floor`."""
    seq_lens: list[int] = setting([16384, 4096, 65536], flag=True,
                                  help="run in this order (each a multiple of --block-size)")
    patterns: list[str] | None = setting(None, flag=True, help="catalogue names, run in this order (default: all "
                                         "but causal, the issue's four first)")
    block_size: int = setting(128, flag=True, lo=0)
    batch: int = setting(1, flag=True, lo=0)
    heads: int = setting(8, flag=True, lo=0)
    d_head: int = setting(64, flag=True, lo=0)
    dtype: str = setting("bfloat16", flag=True, choices=sorted(_TOLERANCE))
    device: str | None = setting(None, flag=True, help="default: cuda when present, else cpu")
    threads: int = setting(0, flag=True, lo=0, help="torch CPU threads (0: torch's default); 1 on a shared CPU, "
                           "where a busy core stalls the compiled kernel's OpenMP barriers for a scheduler tick")
    warmup: int = setting(3, flag=True, lo=0)
    reps: int = setting(10, flag=True, lo=0, help="timed calls per cell (median)")
    time: float = setting(150.0, flag=True, old=("--budget-s",), metavar="DUR", parse=seconds,
                          help="start no row after this long (compilation included; 150, 90s, 5m); the rest "
                               "are skipped")
    profile: str = setting("sliding_window", flag=True, help="pattern to profile, or 'none'")
    profile_len: int = setting(16384, flag=True, lo=0)
    out: str = setting("runs/bench/flex_floor", flag=True, help="directory for flex_floor.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def run(args) -> int:
    import torch

    from ..nn.patterns.examples import examples
    for name in ("block_size", "batch", "heads", "d_head", "reps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    bad = [L for L in args.seq_lens if L < args.block_size or L % args.block_size]
    if bad:
        raise ValueError(f"--seq-lens {bad} must be multiples of --block-size {args.block_size}")
    catalogue = [n for n in examples(1024) if n != "causal"]
    names = args.patterns or [n for n in PRIORITY if n in catalogue] + [n for n in catalogue if n not in PRIORITY]
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise ValueError(f"unknown pattern(s) {unknown}; choose from {', '.join(catalogue)}")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: no CUDA device here; use --device cpu")
    if device.type == "cuda" and device.index is None:
        # Plans are cached by str(device): "cuda" and the kernel's "cuda:0" would plan everything twice.
        device = torch.device("cuda", torch.cuda.current_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    _raise_recompile_limits()
    env = dict(torch=torch.__version__, device=str(device), dtype=args.dtype, batch=args.batch, heads=args.heads,
               d_head=args.d_head, block_size=args.block_size,
               gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "")
    out = Path(args.out)
    start, rows, dense = time.perf_counter(), [], {}
    for L in args.seq_lens:
        for name in names:
            if time.perf_counter() - start > args.time:
                rows.append(dict(env, pattern=name, seq_len=L, status="skipped"))
                continue
            rows.append(dict(env, **_row(name, L, args, device, dense, out)))
            print(f"# {name} L={L}: {rows[-1]['status']} ({time.perf_counter() - start:.0f} s)", file=sys.stderr,
                  flush=True)
            write_rows(out, "flex_floor", rows, FIELDS)
    write_rows(out, "flex_floor", rows, FIELDS)
    (out / "flex_floor_meta.json").write_text(json.dumps(dict(
        env, argv=sys.argv, elapsed_s=round(time.perf_counter() - start, 1), budget_s=args.time,
        triton=_version("triton")), indent=2))
    try:
        plot(rows, out / "flex_floor.png")
    except Exception as e:  # noqa: BLE001 - the rows are the result; a plot failure must not hide them
        print(f"# plot failed: {_one_line(e)}", file=sys.stderr)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0


def _row(name: str, L: int, args, device, dense: dict, out: Path) -> dict:
    """One pattern at one length: every field of FIELDS it could measure, errors recorded."""
    import torch
    import torch.nn.functional as F

    from ..nn.kernels import FlexKernel
    from ..nn.kernels.flex import _flex
    from ..nn.patterns.examples import examples
    row: dict = dict(pattern=name, seq_len=L, status="ok")
    cuda = device.type == "cuda"
    try:
        b, h, e, block = args.batch, args.heads, args.d_head, args.block_size
        dtype = getattr(torch, args.dtype)
        q, k, v, grad = (torch.randn(b, h, L, e, device=device, dtype=dtype) for _ in range(4))
        qg, kg, vg = (t.clone().requires_grad_(cuda) for t in (q, k, v))
        if L not in dense:
            sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            dense[L] = _times(sdpa, (qg.detach().requires_grad_(), kg.detach().requires_grad_(),
                                     vg.detach().requires_grad_()), grad, args, cuda, train=True)
        row.update({f"dense_{key}": val for key, val in dense[L].items() if key != "first_s"})
        pattern = examples(L)[name]
        nt = L // block
        row["tiles_dense"] = h * nt * (nt + 1) // 2
        kernel, mask = FlexKernel(block), None

        def plan():  # tfamily's plans (cached: the kernel's first call reuses them)
            row["density"] = round(allowed_pairs(pattern, L, h, block, device) / (h * L * L), 5)
            row["tiles_a"] = visited_tiles(pattern, L, h, block, device)

        def floor():
            nonlocal mask
            mask = floor_block_mask(pattern, L, h, block, device)
            row["tiles_b"] = block_mask_tiles(mask, h)
        calls = {"a": (plan, "plan_ms", lambda q, k, v: kernel(q, k, v, pattern=pattern)[0]),
                 "b": (floor, "mask_ms", lambda q, k, v: _flex()(q, k, v, block_mask=mask))}
        outs = _run_kernels(row, calls, (qg, kg, vg), grad, args, cuda)
        if len(outs) == 2:
            row.update(compare(outs["a"], outs["b"]))
            if max(row["max_abs_diff"], row.get("grad_rel_diff", 0.0)) > _TOLERANCE[args.dtype]:
                row["status"] = "mismatch"
        _ratios(row)
        if args.profile == name and args.profile_len == L:
            profile({tag: calls[tag][2] for tag in outs}, (qg, kg, vg), grad, cuda, out / "flex_floor_profile.txt",
                    f"{name} L={L}")
    except Exception as err:  # noqa: BLE001 - recorded in the row; the next row still runs
        row.update(status="error", error=_one_line(err))
        if cuda:
            torch.cuda.empty_cache()
    return row


def _run_kernels(row: dict, calls: dict, qkv: tuple, grad, args, cuda: bool) -> dict:
    """Prepare and time each of ``calls`` (tag: (prepare, its row key, fn)) into ``row``; their outputs
    by tag, for the comparison. A kernel that fails is recorded in the row and the others still run."""
    import torch
    outs = {}
    for tag, (prepare, prepare_key, fn) in calls.items():
        try:  # one failing kernel must not end the row, nor the run
            t0 = time.perf_counter()
            prepare()
            row[prepare_key] = round((time.perf_counter() - t0) * 1e3, 1)
            got = _times(fn, qkv, grad, args, cuda, train=cuda)
            row.update({f"{tag}_{key}": val for key, val in got.items()})
            outs[tag] = _result(fn, qkv, grad, train=cuda)
        except Exception as err:  # noqa: BLE001 - recorded in the row
            row[f"{tag}_error"] = _one_line(err)
            row["status"] = "partial"
            if cuda:
                torch.cuda.empty_cache()
    return outs


def _ratios(row: dict) -> None:
    def ratio(x, y):
        return None if row.get(x) is None or not row.get(y) else round(row[x] / row[y], 3)
    row["a_vs_b_fwd"], row["a_vs_b_fwd_bwd"] = ratio("a_fwd_ms", "b_fwd_ms"), ratio("a_fwd_bwd_ms", "b_fwd_bwd_ms")
    row["a_vs_dense_fwd_bwd"] = ratio("a_fwd_bwd_ms", "dense_fwd_bwd_ms")
    dense_per_tile = row["dense_fwd_bwd_ms"] / row["tiles_dense"]
    for tag in "ab":
        t, tiles = row.get(f"{tag}_fwd_bwd_ms"), row.get(f"tiles_{tag}")
        row[f"{tag}_tile_vs_dense"] = None if t is None or not tiles else round(t / tiles / dense_per_tile, 3)


def compare(a: tuple, b: tuple) -> dict:
    """(output, *gradients) of two kernels: the outputs' largest difference, and the gradients'
    largest difference relative to the largest gradient (they grow with the keys a query sees)."""
    got = dict(max_abs_diff=float((a[0] - b[0]).abs().max()))
    if len(a) > 1:
        got["grad_rel_diff"] = max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
                                   for x, y in zip(a[1:], b[1:]))
    return got


def _result(fn, leaves: tuple, grad, train: bool) -> tuple:
    """The output in fp32 and, when ``train``, the leaves' gradients from one backward."""
    import torch
    for t in leaves:
        t.grad = None
    with torch.set_grad_enabled(train):
        out = fn(*leaves)
    if not train:
        return (out.float(),)
    out.backward(grad)
    return (out.detach().float(), *(t.grad.float() for t in leaves))


def _times(fn, leaves: tuple, grad, args, cuda: bool, train: bool) -> dict:
    """First call (compilation), forward and (when ``train``) fwd+bwd median ms, the host's ms to
    issue one forward, and the memory one fwd+bwd call allocates above what was held before it."""
    import torch

    def forward():
        with torch.set_grad_enabled(train):
            fn(*leaves)

    def step():
        for t in leaves:
            t.grad = None  # as zero_grad does: else each call also adds into the leaves' .grad
        fn(*leaves).backward(grad)
    t0 = time.perf_counter()
    (step if train else forward)()
    _sync(cuda)
    got = dict(first_s=round(time.perf_counter() - t0, 2))
    got["fwd_ms"], got["fwd_host_ms"] = _median_ms(forward, args.warmup, args.reps, cuda)
    if train:
        got["fwd_bwd_ms"], _ = _median_ms(step, args.warmup, args.reps, cuda)
    if train and cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        got["peak_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2 ** 20, 1)
    return got


def _median_ms(fn, warmup: int, reps: int, cuda: bool) -> tuple[float, float]:
    """Median device ms per call (CUDA events; wall clock on CPU) and median host ms to issue it."""
    import torch
    for _ in range(warmup):
        fn()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    device, host = [], []
    for _ in range(reps):
        _sync(cuda)
        if cuda:
            start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if cuda:
            end.record()
            end.synchronize()
            device.append(start.elapsed_time(end))
        else:
            device.append((t1 - t0) * 1e3)
        host.append((t1 - t0) * 1e3)
    return round(statistics.median(device), 4), round(statistics.median(host), 4)


def floor_block_mask(pattern, L: int, n_heads: int, block: int, device):
    """The BlockMask a FlexAttention user builds for ``pattern``: its ``mask_mod`` evaluated on every
    (head, query, key), query tiles a chunk at a time, reduced to partial and full tiles. This is
    what ``create_block_mask`` computes, without its (B, H, L, L) intermediates (tens of GB for a
    per-head pattern at 64K). One layout for all heads unless the pattern depends on the head."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    from ..nn.patterns import is_per_head
    H = n_heads if is_per_head(pattern) else 1
    nt = L // block
    b = torch.zeros((), dtype=torch.long, device=device)
    hs = torch.arange(H, device=device).view(H, 1, 1)
    kv = torch.arange(L, device=device).view(1, 1, L)
    step = max(1, _CHUNK // (H * L * block))
    any_tiles, all_tiles = [], []
    for t0 in range(0, nt, step):
        t1 = min(nt, t0 + step)
        qs = torch.arange(t0 * block, t1 * block, device=device).view(1, -1, 1)
        m = pattern.mask_mod(b, hs, qs, kv).expand(H, qs.shape[1], L).reshape(H, t1 - t0, block, nt, block)
        any_tiles.append(m.any(4).any(2))
        all_tiles.append(m.all(4).all(2))
    some, every = torch.cat(any_tiles, 1), torch.cat(all_tiles, 1)

    def table(sel):  # per query tile: how many key tiles, and which (listed first, ascending)
        order = torch.sort((~sel).to(torch.uint8), dim=-1, stable=True).indices
        return sel.sum(-1).to(torch.int32)[None], order.to(torch.int32)[None]
    return BlockMask.from_kv_blocks(*table(some & ~every), *table(every), BLOCK_SIZE=block,
                                    mask_mod=pattern.mask_mod, seq_lengths=(L, L))


def block_mask_tiles(mask, n_heads: int) -> int:
    """(head, query tile, key tile) triples a BlockMask visits, a layout shared by heads counted per head."""
    per = int(mask.kv_num_blocks.sum()) + int(mask.full_kv_num_blocks.sum())
    return per * (n_heads if mask.kv_num_blocks.shape[1] == 1 else 1)


def _raise_recompile_limits() -> None:
    """Each (pattern, length) compiles its own kernels; past dynamo's limits flex would silently run
    eagerly, materialising L x L scores, and the rows would time that instead."""
    import torch._dynamo.config as dynamo_config
    for name in ("recompile_limit", "accumulated_recompile_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 1024))


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - only reported
        return None


if __name__ == "__main__":
    # `python -m tfamily.bench.flex_floor` imports no other command's module: on a GPU image without the
    # CLI's optional dependencies (pyyaml, tqdm, tensorboard) it still runs.
    from ..cli import Parser
    parser = Parser(prog="tfamily bench flex-floor", description=__doc__.splitlines()[0])
    add_args(parser)
    sys.exit(run(parser.parse_args()))
