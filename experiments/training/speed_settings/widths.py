"""The 1.2x check: at three widths of the gpt member (size small otherwise: 4 layers, batch 16 x 128),
one training step (forward, backward, AdamW) at each of {1, all cores} x {fp32, bf16} against the
default the calibration picks, the settings alternated in one process over rounds (the load moves
all of them alike), median of the rounds.

    TFAMILY_DATA=... TFAMILY_CALIBRATION=... python experiments/training/speed_settings/widths.py > widths.csv
"""
import csv
import os
import shutil
import statistics
import sys
import time

import torch
from tfamily.base.hardware import cores, cpu_has_bf16
from tfamily.train import calibrate, loop
from tfamily.train.config import load
from tfamily.train.device import autocast

ROUNDS = 5
w = csv.writer(sys.stdout)
w.writerow(["d_model", "setting", "step_s", "over_best", "default", "load"])
for d in (128, 256, 512):
    shutil.rmtree(f"/tmp/speed_widths/{d}", ignore_errors=True)
    tr = loop.Trainer(load(None, {"member": "gpt", "model.d_model": d, "train.progress": False,
                                  "train.tensorboard": False, "train.out": f"/tmp/speed_widths/{d}"},
                           base={"size": "auto"}))
    default = (torch.get_num_threads(), tr.precision)
    settings = [(n, p) for n in sorted({1, cores()}) for p in (("fp32", "bf16") if cpu_has_bf16() else ("fp32",))]
    times = {s: [] for s in settings}
    batch = tr._next_batch()
    for r in range(ROUNDS + 1):
        for n, p in settings:
            torch.set_num_threads(n)
            t0 = time.perf_counter()
            with autocast(tr.device, p):
                loss, _ = tr.model.loss(batch)
            loss.backward()
            tr.optimizer.step()
            tr.optimizer.zero_grad(set_to_none=True)
            if r:
                times[(n, p)].append(time.perf_counter() - t0)
    med = {s: statistics.median(t) for s, t in times.items()}
    best = min(med.values())
    for s in settings:
        w.writerow([d, f"{s[0]}/{s[1]}", round(med[s], 4), round(med[s] / best, 2), s == default,
                    round(os.getloadavg()[0], 2)])
    sys.stdout.flush()
    tr.close()
