"""The in-kernel time split of the tried per-thread dK/dV slab (variant 17 of variant.patch) against
the landed route (variant 1), two alternations in one process, bf16, 16K, 2 threads:

    THP_MEM_ALLOC_ENABLE=1 PYTHONPATH=src python experiments/attention/kernel_loops_xeon/scratch_split.py OUT_DIR

on a scratch worktree of 0811db2 with ``variant.patch`` applied. Writes one
``scripts/kernel_time_split.py`` JSON per (round, variant) to OUT_DIR and prints its lines.
"""
import sys
from pathlib import Path

SCRIPTS = Path(__file__).parents[3] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import kernel_time_split  # noqa: E402
from tfamily.nn.kernels import native  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
ops = native.ops()
for round_ in (1, 2):
    for variant in (1, 17):
        ops.set_variant(variant)
        print(f"variant {variant}, round {round_}", flush=True)
        kernel_time_split.main([str(out / f"split_v{variant}_r{round_}.json"), "sliding_window", "strided_heads",
                                "--dtype", "bfloat16", "--rounds", "3", "--no-sdpa"])
