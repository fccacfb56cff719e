"""`tfamily demo` (and `make demo`): a small character-level GPT on Tiny Shakespeare
within a wall-clock budget, then its validation bits per character and a sample.

The budget covers the whole command: training gets what is left after start-up
and a reserve for the final full-split evaluation and the sample, and its
cosine schedule ends when the budget does (``budget.Budget.horizon``).
"""
from __future__ import annotations

import json
import math
import sys
import time
from datetime import datetime

import torch

from ..settings.run import parse_overrides
from .config import load, parse_duration
from .device import describe
from .loop import NonFiniteLoss, Trainer
from .sample import Trained, sample_text

TARGET_NATS = 1.70  # the target: validation loss <= 1.70 nats/char within 5 minutes


def run(args) -> int:
    t0 = time.perf_counter()
    total = parse_duration(args.time, "--time")
    out = args.out or f"runs/demo/{datetime.now():%Y%m%d-%H%M%S}"
    flags = {"train.seed": args.seed, "train.device": args.device}
    overrides = {**parse_overrides(args.overrides), **{k: v for k, v in flags.items() if v is not None},
                 "train.out": out, "train.time_budget": total}
    cfg = load(args.config, overrides, base={"size": "auto"})  # as `tfamily train`: small on a CPU
    trainer = Trainer(cfg, data_dir=args.data_dir)
    # The trainer keeps back time for the final evaluation itself (from the measured step
    # rate); here: start-up so far and the sample.
    reserve = min(0.1 * total, 2.0 + args.sample_tokens / 100)
    trainer.budget.seconds = max(1.0, total - reserve - (time.perf_counter() - t0))
    spec, src = trainer.spec, trainer.task
    log = sys.stderr
    if trainer.thread_rates and len(trainer.thread_rates) > 1:
        print("tfamily demo: matrix-product speed by thread count: " + ", ".join(
            f"{n} thread{'s' * (n > 1)} {r / 1e9:,.0f} GFLOP/s" for n, r in trainer.thread_rates.items())
              + f"; using {torch.get_num_threads()}", file=log, flush=True)
    if trainer.precision_rates:
        print("tfamily demo: training speed by precision: " + ", ".join(
            f"{p} {r:,.0f} tokens/s" for p, r in trainer.precision_rates.items())
              + f"; using {trainer.precision}", file=log, flush=True)
    print(f"tfamily demo: {cfg.member} (d_model {spec.d_model}, {spec.depth.n_layers} layers, "
          f"{trainer.params / 1e6:.2f}M parameters) on {src.name} ({src.vocab.name} vocabulary, "
          f"{src.vocab_size} symbols), sequences of {src.seq_len}, batch {cfg.train.batch_size}; "
          f"{trainer.budget.seconds:.0f} s for training and evaluation on {describe(trainer.device)} in {trainer.precision}",
          file=log, flush=True)
    try:
        result = trainer.fit()
    except NonFiniteLoss as e:
        trainer.close(sync=False)
        print(f"tfamily demo: stopped: {e}", file=sys.stderr)
        return 3
    except BaseException:
        trainer.close(sync=False)
        raise
    trainer.close()
    model = trainer.model.eval()
    tr = Trained(model, spec, {"source": {"seq_len": src.seq_len}}, src.vocab, trainer.last_ckpt)
    sample = sample_text(tr, "\n", args.sample_tokens, temperature=0.8, seed=cfg.train.seed) \
        if args.sample_tokens > 0 else ""
    result["sample"] = sample
    result["demo_wall_s"] = time.perf_counter() - t0
    result["target_val_loss"] = TARGET_NATS
    if args.json:
        print(json.dumps(result))
        return 0
    reached = "reached" if result["val_loss"] <= TARGET_NATS else "not reached"
    print(f"\nvalidation ({src.name}, {trainer.last_eval['tokens']:,} characters): "
          f"loss {result['val_loss']:.3f} nats/char = {result['val_bpc']:.3f} bits/char "
          f"(target <= {TARGET_NATS} nats = {TARGET_NATS / math.log(2):.2f} bpc: {reached})")
    print(f"trained {result['steps']} steps, {result['tokens']:,} tokens in {result['train_s']:.0f} s "
          f"({result['tokens_per_s']:,.0f} tokens/s, {result['threads']} thread{'s' * (result['threads'] > 1)}); "
          f"whole demo {result['demo_wall_s']:.0f} s")
    print(f"\nsample (temperature 0.8):\n{'-' * 60}\n{sample.strip()}\n{'-' * 60}")
    print(f"run directory: {out}\n  more text:  tfamily generate {out} --prompt 'ROMEO:'\n"
          f"  evaluate:   tfamily eval {out} --split test")
    return 0
