"""Where one training step of the demo goes: batch, forward, backward, gradient clipping, Muon,
AdamW and the weights-finite check, timed apart (median of 30 steps after 10 warm-up steps) on the
demo's own model and data; `--profile` adds torch.profiler's table of 10 whole steps.

    python experiments/recipe/demo_bf16/step_parts.py --threads 2 --precision fp32
    python experiments/recipe/demo_bf16/step_parts.py --threads 2 --precision bf16 --profile
"""
import argparse
import statistics
import tempfile
import time

import torch

from tfamily.train import distributed
from tfamily.train.config import load
from tfamily.train.device import autocast
from tfamily.train.loop import Trainer

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
ap.add_argument("--profile", action="store_true")
args = ap.parse_args()

out = tempfile.mkdtemp()
cfg = load("demo", {"train.out": out, "train.threads": args.threads, "train.time_budget": None,
                    "train.max_steps": 1000, "train.precision": args.precision}, base={"size": "auto"})
tr = Trainer(cfg)
for _ in range(10):
    tr.train_step()
times: dict[str, list[float]] = {}


def timed(name, f):
    t0 = time.perf_counter()
    r = f()
    times.setdefault(name, []).append(time.perf_counter() - t0)
    return r


def forward(batch):
    with autocast(tr.device, tr.precision):
        return tr.loss_fn(batch)[0]


opt = tr.optimizer
for _ in range(30):
    batch = timed("batch", tr._next_batch)
    loss = timed("forward", lambda: forward(batch))
    timed("backward", loss.backward)
    timed("clip", lambda: float(torch.nn.utils.clip_grad_norm_(tr.model.parameters(), 1.0)))
    if hasattr(opt, "muon"):
        timed("muon", opt.muon.step)
        timed("adamw", opt.adamw.step)
    else:
        timed("adamw", opt.step)
    timed("finite", lambda: distributed.weights_finite(tr.model, tr.dist))
    opt.zero_grad(set_to_none=True)
ms = {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()}
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {tr.precision}: ms per part {ms}, "
      f"sum {sum(ms.values()):.1f}")
if args.profile:
    from torch.profiler import profile
    with profile() as p:
        for _ in range(10):
            tr.train_step()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
