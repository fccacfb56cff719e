"""Step time of every member at size small against the gpt member's, alternating in one process
(1 thread, fp32; the ratio holds under a changing load), and the time of one evaluation.

    TFAMILY_DATA=... python experiments/training/size_small/steps.py gpt,bert,... > rows.jsonl
"""
import json
import shutil
import sys
import time

import torch
from tfamily.train import loop
from tfamily.train.config import load
torch.set_num_threads(1)
ENC = {"vanilla": "reverse", "lstm_seq2seq": "reverse", "luong_attention": "reverse", "bahdanau_attention": "reverse",
       "universal_transformer": "copy"}
names = sys.argv[1].split(",")
def trainer(name):
    o = {"member": name, "size": "small", "train.threads": 1, "train.precision": "fp32", "train.progress": False,
         "train.tensorboard": False, "train.out": f"/tmp/size_small/{name}"}
    if name in ENC:
        o.update({"data.corpus": None, "data.task": ENC[name]})
    shutil.rmtree(f"/tmp/size_small/{name}", ignore_errors=True)
    return loop.Trainer(load(None, o, base={"size": "auto"}))
def timed(tr, n=3):
    tr.train_step()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); _, _, units = tr.train_step(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts)//2], units
ref = trainer("gpt")
for name in names:
    tr = trainer(name)
    a, u = timed(tr); g, gu = timed(ref); b, _ = timed(tr); g2, _ = timed(ref)
    step, gstep = (a + b) / 2, (g + g2) / 2
    e0 = time.perf_counter(); tr.evaluate(); ev = time.perf_counter() - e0
    print(json.dumps({"member": name, "params": tr.params, "units": u, "step_s": round(step, 3), "gpt_step_s": round(gstep, 3),
                      "ratio": round(step / gstep, 2), "eval_s": round(ev, 1), "max_steps": tr.cfg.train.max_steps}), flush=True)
    tr.close()
