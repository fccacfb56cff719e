"""The long-context conversion of docs/results/pretrained.md, end to end on a CPU (about 12 minutes):

1. train a GPT-2-shaped character model (the gpt member at size small) on Tiny Shakespeare at context 128;
2. export it as a Hugging Face GPT-2 directory (tfamily export --format hf);
3. re-import it unchanged (--init-from) and score it: the round trip keeps its bpc;
4. re-import it as a sliding-window model (window 128) with a 4x longer context (512, the learned
   position table copied 4 times) and score it before fine-tuning;
5. fine-tune that model briefly at context 512 and score it again.

    TFAMILY_DATA=/work/shared/data python experiments/pretrained/run.py /tmp/pretrained

Writes OUT/rows.json (copied to experiments/pretrained/rows.json by hand) and prints the table.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tfamily.train import loop
from tfamily.train.config import load, parse_overrides

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pretrained")
COMMON = ["train.precision=fp32", "train.eval_every=null", "train.eval_tokens=null", "train.progress=false",
          "train.tensorboard=false"]
BASE = ["--member", "gpt", "--size", "small", "data.seq_len=128", "model.position.max_len=128",
        "--time-budget", "4m", *COMMON]
LONG = ["model.pattern.name=sliding_window", "model.pattern.params.window=128", "model.position.max_len=512",
        "data.seq_len=512", "train.batch_size=4"]


def tfamily(*args: str) -> dict | None:
    print("$ tfamily", " ".join(args), flush=True)
    out = subprocess.run([sys.executable, "-m", "tfamily.cli", *args], check=True, capture_output=True, text=True)
    print(out.stderr[-2000:], flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if "--json" in args else None


def score(overrides: list[str], name: str) -> tuple[float, list[str]]:
    """The validation bpc of a run started from the export with ``overrides``, before any step."""
    cfg = load(None, {**parse_overrides(overrides), "train.init_from": str(OUT / "hf"), "member": "gpt2",
                      "train.max_steps": 1, "train.out": str(OUT / name)}, base={"size": "auto"})
    tr = loop.Trainer(cfg)
    try:
        return tr.evaluate()["bpc"], tr.notes
    finally:
        tr.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not (OUT / "base" / "result.json").exists():  # a rerun keeps what is done
        tfamily("train", *BASE, "--out", str(OUT / "base"), "--json")
    base = json.loads((OUT / "base" / "result.json").read_text())
    if not (OUT / "hf").exists():
        tfamily("export", str(OUT / "base"), "--format", "hf", "--out", str(OUT / "hf"))
    same, _ = score(["data.seq_len=128", *COMMON], "same")
    before, notes = score([*LONG, *COMMON], "before")
    long = tfamily("train", "--init-from", str(OUT / "hf"), *LONG, *COMMON, "--time-budget", "3m",
                   "--out", str(OUT / "long"), "--json")
    rows = [
        {"model": "gpt (small), trained here", "context": 128, "pattern": "causal", "steps": base["steps"],
         "train_s": round(base["train_s"], 1), "val_bpc": base["val_bpc"]},
        {"model": "exported to HF, re-imported", "context": 128, "pattern": "causal", "steps": 0, "train_s": 0,
         "val_bpc": same},
        {"model": "re-imported as sliding window, table x4", "context": 512, "pattern": "sliding_window 128",
         "steps": 0, "train_s": 0, "val_bpc": before},
        {"model": "the same, fine-tuned", "context": 512, "pattern": "sliding_window 128", "steps": long["steps"],
         "train_s": round(long["train_s"], 1), "val_bpc": long["val_bpc"]},
    ]
    meta = {"notes": notes + long["notes"], "params": base["params"], "threads": base["threads"],
            "precision": base["precision"], "wall_s": round(time.time() - t0)}
    (OUT / "rows.json").write_text(json.dumps({"rows": rows, "meta": meta}, indent=1))
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
