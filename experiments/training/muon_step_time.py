"""Time one optimiser step of the demo model (d 128, 4 layers, rotary) with AdamW and with Muon,
and one forward + backward beside it, so Muon's Newton-Schulz cost can be read against the step.

Usage: .venv/bin/python experiments/training/muon_step_time.py [--threads 2] [--ns-dtype auto|bf16|fp32]
To see a CPU without native bf16 on one that has it, run it as
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 ... --ns-dtype bf16`` (torch.optim.Muon's dtype,
then emulated) and ``... --ns-dtype fp32`` (what ``train/optim.py`` picks there).
"""
from __future__ import annotations

import argparse
import time

import torch

import tfamily
from tfamily import members
from tfamily.train.optim import MuonAdamW, adamw


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ns-dtype", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = tfamily.build(members.gpt(vocab_size=65, d_model=128, depth__n_layers=4, heads__n_heads=4, dropout=0.0,
                                      position__name="rotary"))
    x = torch.randint(0, 65, (16, 128))
    ns = {"auto": None, "bf16": torch.bfloat16, "fp32": torch.float32}[args.ns_dtype]
    for name, opt in (("adamw", adamw(model, 1e-3, 0.1)), ("muon", MuonAdamW(model, 1e-3, 0.1, ns_dtype=ns))):
        for p_ in model.parameters():
            p_.grad = torch.randn_like(p_)
        for _ in range(3):
            opt.step()
        t = time.perf_counter()
        for _ in range(args.reps):
            opt.step()
        step = (time.perf_counter() - t) / args.reps
        t = time.perf_counter()
        for _ in range(5):
            model(x).float().logsumexp(-1).mean().backward()
        fb = (time.perf_counter() - t) / 5
        extra = f" (Newton-Schulz in {opt.muon.ns_dtype})" if name == "muon" else ""
        print(f"{name}: optimiser step {step * 1e3:.1f} ms{extra}; forward + backward {fb * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
