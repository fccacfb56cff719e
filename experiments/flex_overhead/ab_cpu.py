"""CPU A/B of the flex kernel's overhead: flex.py at a given commit ("before") against the working
tree ("after") and the plain compiled flex_attention call with the floor BlockMask ("plain"),
compiled forward (CPU FlexAttention is forward-only), in one process, alternating.

    PYTHONPATH=src .venv/bin/python experiments/flex_overhead/ab_cpu.py --before e087bfa \
        --out experiments/flex_overhead/cpu_ab.json

One thread: with two, the 2-core VM's other load stalls OpenMP barriers for a 4 ms scheduler tick
(a 0.1 ms call then reads 12 ms). Reported: median ms over --rounds alternating rounds of --calls
calls each, and the median host ms of one call.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tfamily.bench.flex_floor import floor_block_mask
from tfamily.nn.kernels import flex as flex_after
from tfamily.nn.patterns.examples import examples

CONFIGS = {"small": dict(L=512, h=2, e=16, block=64), "medium": dict(L=2048, h=8, e=64, block=128)}


def load_before(commit: str):
    src = subprocess.run(["git", "show", f"{commit}:src/tfamily/nn/kernels/flex.py"], capture_output=True,
                         text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "flex_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("tfamily.nn.kernels._flex_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--patterns", nargs="+", default=["sliding_window", "longformer", "bigbird", "local_1d",
                                                       "strided_heads"])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    before = load_before(args.before)
    rows = []
    for cfg in args.configs:
        c = CONFIGS[cfg]
        for name in args.patterns:
            pattern = examples(c["L"])[name]
            q, k, v = (torch.randn(1, c["h"], c["L"], c["e"]) for _ in range(3))
            mask = floor_block_mask(pattern, c["L"], c["h"], c["block"], "cpu")
            fns = {"before": lambda: before.FlexKernel(c["block"])(q, k, v, pattern=pattern)[0],
                   "after": lambda: flex_after.FlexKernel(c["block"])(q, k, v, pattern=pattern)[0],
                   "plain": lambda: flex_after._flex()(q, k, v, block_mask=mask)}
            times = {key: [] for key in fns}
            with torch.no_grad():
                outs = {key: fn() for key, fn in fns.items()}  # compiles
                for _ in range(args.rounds):
                    for key, fn in fns.items():
                        t0 = time.perf_counter()
                        for _ in range(args.calls):
                            fn()
                        times[key].append((time.perf_counter() - t0) * 1e3 / args.calls)
            row = dict(config=cfg, pattern=name, **c, **{f"{key}_ms": round(statistics.median(t), 4)
                                                       for key, t in times.items()},
                       diff_after_plain=float((outs["after"] - outs["plain"]).abs().max()),
                       diff_after_before=float((outs["after"] - outs["before"]).abs().max()))
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(dict(torch=torch.__version__, before=args.before, cpu=_cpu(),
                                              threads=1, rows=rows), indent=2))
    return 0


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
