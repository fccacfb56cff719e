"""What the first estimate would be from FLOPs alone (the calibration reference's FLOP/s at the run's
setting), per member, to tell which rows of estimates.csv timed the model and which fell back to
FLOPs (the start times three steps only when FLOPs predict them under 1.5 s, and gives up past 6 s).

    TFAMILY_DATA=... TFAMILY_CALIBRATION=... python experiments/training/speed_settings/flop_estimates.py > flop_estimates.csv
"""
import csv
import shutil
import sys

from tfamily.train import loop, startup
from tfamily.train.config import load

from estimates import ENC, MEMBERS

startup.ESTIMATE_S = 0.0  # never time the model: the FLOPs estimate
w = csv.writer(sys.stdout)
w.writerow(["member", "flops_estimate_s_per_100"])
for name in MEMBERS:
    o = {"member": name, "train.progress": False, "train.tensorboard": False, "train.out": f"/tmp/flop_est/{name}"}
    if name in ENC:
        o.update({"data.corpus": None, "data.task": ENC[name]})
    shutil.rmtree(o["train.out"], ignore_errors=True)
    tr = loop.Trainer(load(None, o, base={"size": "auto"}))
    w.writerow([name, round(100 * tr.step_s, 2)])
    tr.close()
