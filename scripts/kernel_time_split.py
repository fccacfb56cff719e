"""Where the compiled block-sparse kernel's time goes, measured inside it, and what that says about
the 1.5x target of `tfamily bench attention`.

    THP_MEM_ALLOC_ENABLE=1 python scripts/kernel_time_split.py OUT.json PATTERN... \
        [--dtype bfloat16] [--seq-len 16384] [--threads 2] [--rounds 3] [--no-sdpa]

For each pattern (names as in the bench) it runs forward+backward `--rounds` times with the
kernel's time split on (the `kernel_time_split` op; TimeSplit in csrc/common.h) and keeps the
fastest call. Thread-summed: the time inside the tile loops, of that the time inside tile GEMMs
(MKL), and each stretch of a tile's work with its GEMMs taken out; `outside` is wall x threads
less the loops (Python, allocation, the D pass, waits). Unless `--no-sdpa`, dense causal SDPA is
timed in the same process and each row gets the bench's target, 1.5 x causal density x SDPA, next
to the GEMMs alone at full thread parallelism (gemm_ms / threads): where that alone reaches the
target, no work outside the GEMMs can be cut to meet it. The same settings as the bench (b=1, h=8,
e=64, its tile sizes), so run it with THP_MEM_ALLOC_ENABLE=1 as the bench's workers are.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from ab_common import add_common_args, causal_density, inputs  # scripts/ (this script's directory)

# csrc/blocksparse.cpp's Section enum, in order.
SECTIONS = ["fwd.load_q", "fwd.load_kv", "fwd.mask", "fwd.softmax", "fwd.round_p", "fwd.write_out",
            "bwd.slabs", "bwd.load_q_do", "bwd.load_kv", "bwd.mask", "bwd.exp", "bwd.grads", "bwd.scatter",
            "bwd.write_dq"]


def split_call(ops, step) -> tuple[float, dict]:
    """One call of ``step`` with the split on: (wall ms, thread-summed ms by part)."""
    ops.kernel_time_split(True)
    t0 = time.perf_counter()
    step()
    wall = (time.perf_counter() - t0) * 1e3
    raw = ops.kernel_time_split(False)
    if len(raw) != 3 + len(SECTIONS):
        raise SystemExit(f"kernel_time_split returned {len(raw)} values, this script names {3 + len(SECTIONS)}: "
                         "update SECTIONS to csrc/blocksparse.cpp's Section enum")
    busy, gemm, calls = raw[0] / 1e6, raw[1] / 1e6, raw[2]
    parts = dict(loops_ms=busy, gemm_ms=gemm, gemm_calls=calls,
                 sections_ms={n: x / 1e6 for n, x in zip(SECTIONS, raw[3:])})
    return wall, parts


def main(argv=None) -> int:
    from tfamily.nn.kernels import KERNELS, native
    from tfamily.nn.patterns.examples import examples

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("patterns", nargs="+")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    add_common_args(p, rounds=3)
    p.add_argument("--no-sdpa", action="store_true", help="skip the dense SDPA timing (and the target)")
    args = p.parse_args(argv)
    ops = native.ops()
    if ops is None:
        raise SystemExit("kernel_time_split: the compiled kernels are not available (no compiler, or "
                         "TFAMILY_NATIVE=0); the split measures inside them")
    unknown = sorted(set(args.patterns) - set(examples(args.seq_len)))
    if unknown:
        raise SystemExit(f"kernel_time_split: unknown pattern(s) {unknown}; choose from {sorted(examples(args.seq_len))}")
    torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    L = args.seq_len
    q, k, v, grad = inputs(L, getattr(torch, args.dtype))
    kernel = KERNELS["blocksparse"](block_size="auto")

    def run(fn):
        for x in (q, k, v):
            x.grad = None
        fn(q, k, v).backward(grad)

    sdpa_ms = None
    if not args.no_sdpa:
        sdpa = lambda: run(lambda a, c, d: F.scaled_dot_product_attention(a, c, d, is_causal=True))  # noqa: E731
        sdpa()
        sdpa_ms = min(_timed(sdpa) for _ in range(max(2, args.rounds)))
        print(f"dense causal SDPA fwd+bwd: {sdpa_ms:.0f} ms", flush=True)
    rows = []
    for name in args.patterns:
        pattern = examples(L)[name]
        step = lambda: run(lambda a, c, d: kernel(a, c, d, pattern=pattern)[0])  # noqa: E731,B023
        step()
        step()  # plans built, pages touched once
        wall, parts = min((split_call(ops, step) for _ in range(args.rounds)), key=lambda c: c[0])
        row = dict(pattern=name, dtype=args.dtype, seq_len=L, threads=threads, wall_ms=round(wall, 1),
                   **{key: (round(val, 1) if key.endswith("_ms") else val) for key, val in parts.items()
                      if key != "sections_ms"},
                   outside_ms=round(wall * threads - parts["loops_ms"], 1),
                   sections_ms={n: round(x, 1) for n, x in parts["sections_ms"].items()})
        if sdpa_ms is not None:
            density = causal_density(pattern, L)
            row.update(sdpa_ms=round(sdpa_ms, 1), causal_density=round(density, 5),
                       target_ms=round(1.5 * density * sdpa_ms, 1), vs_target=round(wall / (density * sdpa_ms), 3),
                       gemm_alone_ms=round(parts["gemm_ms"] / threads, 1))
        rows.append(row)
        _print(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(dict(rows=rows), indent=1))
    return 0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _print(r: dict) -> None:
    head = (f"{r['pattern']} {r['dtype']}: {r['wall_ms']:.0f} ms wall; thread-summed {r['loops_ms']:.0f} in the "
            f"tile loops, {r['gemm_ms']:.0f} of it in {r['gemm_calls']} GEMMs; {r['outside_ms']:.0f} outside")
    if "target_ms" in r:
        head += (f" | target {r['target_ms']:.0f} ms (now {r['vs_target']:.2f}x), "
                 f"GEMMs alone {r['gemm_alone_ms']:.0f} ms")
    parts = sorted(r["sections_ms"].items(), key=lambda kv: -kv[1])
    print(head + "\n    " + ", ".join(f"{n} {x:.0f}" for n, x in parts if x >= 0.5), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
