"""The first time estimate of a default run against its measured time per 100 steps (steps 10-110 of
the same run), for every Transformer member at the default size (small on a CPU).

Each member runs as a user runs it, `tfamily train member=M --steps 110` in a fresh process, with the
default train.threads/train.precision (machine: this machine's calibration); evaluation only at the end
on 2,048 tokens and no checkpoint before it, so steps 10-110 are training steps only. Encoder-decoders
train on data.task=reverse (copy for universal_transformer), as in ../size_small/steps.py.

    TFAMILY_DATA=... TFAMILY_CALIBRATION=... python experiments/training/speed_settings/estimates.py [M,M,...] > rows.csv
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time

MEMBERS = ["gpt", "bert", "llama", "sparse_transformer_strided", "sparse_transformer_fixed", "longformer", "bigbird",
           "image_transformer_1d", "image_transformer_2d", "reformer", "transformer_xl", "adaptive_span", "gtrxl",
           "trxl_i", "universal_transformer_lm", "vanilla", "universal_transformer"]
ENC = {"vanilla": "reverse", "universal_transformer": "copy"}
UNIT = {"s": 1, "min": 60, "h": 3600}
FIELDS = ["member", "threads", "precision", "threads_from", "precision_from", "estimate_s_per_100",
          "measured_s_per_100", "ratio", "first_line_s", "load_start", "load_end"]


def seconds(text: str) -> float:
    value, unit = re.match(r"([\d.]+) (s|min|h)$", text).groups()
    return float(value) * UNIT[unit]


def run(member: str, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "tfamily.cli", "train", f"member={member}", "--steps", "110", "--out", out,
            "train.eval_every=null", "train.ckpt_every=null", "train.eval_tokens=2048", "train.progress=false",
            "train.tensorboard=false", "--json"]
    if member in ENC:
        argv += ["data.corpus=null", f"data.task={ENC[member]}"]
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stderr.readline()
    first_s = time.perf_counter() - t0
    rest, err = p.communicate()
    if p.returncode:
        raise SystemExit(f"{member}: {first}{err}")
    result = json.loads(rest.strip().splitlines()[-1])
    estimate = seconds(re.search(r"estimated (.+?) per 100 steps", first).group(1))
    with open(f"{out}/train.csv") as f:
        elapsed = {int(r["step"]): float(r["elapsed_s"]) for r in csv.DictReader(f)}
    measured = elapsed[110] - elapsed[10]
    return {"member": member, "threads": result["threads"], "precision": result["precision"],
            "threads_from": result["threads_from"], "precision_from": result["precision_from"],
            "estimate_s_per_100": round(estimate, 2), "measured_s_per_100": round(measured, 2),
            "ratio": round(estimate / measured, 2), "first_line_s": round(first_s, 1),
            "load_start": round(load0, 2), "load_end": round(os.getloadavg()[0], 2)}


if __name__ == "__main__":
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else MEMBERS
    w = csv.DictWriter(sys.stdout, FIELDS)
    w.writeheader()
    for name in names:
        w.writerow(run(name, f"/tmp/speed_settings/{name}"))
        sys.stdout.flush()
