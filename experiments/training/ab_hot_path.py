"""A/B timings behind the README's hot-path claims (issue 17), each alternated in one process:

1. hooks: the demo GPT's step (set_progress, loss, backward, after_step) with hooks found per
   class (``models.hooks._hooked``, the library's code) against the former runtime-Protocol
   ``isinstance`` on every module, swapped in for the B rounds;
2. dropout: KV-cached greedy decoding of a 6-layer d 256 GPT built with ``dropout=0`` (no
   Dropout modules, ``nn.dropout.maybe_dropout``) against a copy with ``nn.Dropout(0)`` put back.

Usage: .venv/bin/python experiments/training/ab_hot_path.py [--threads 2] [--rounds 15]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

import tfamily.models.hooks as hooks
from tfamily import members
from tfamily.build import build
from tfamily.models.generate import generate

PROTOCOLS = {"aux_loss": hooks.AuxLoss, "after_step": hooks.AfterStep, "set_progress": hooks.SeesProgress}


def _isinstance_scan(model, hook):  # the lookup before this change
    return [(n, m) for n, m in model.named_modules() if m is not model and isinstance(m, PROTOCOLS[hook])]


def _alternate(cells: dict, rounds: int, reps: int) -> dict:
    times = {k: [] for k in cells}
    for _ in range(rounds):
        for name, fn in cells.items():
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t) / reps * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def hooks_ab(rounds: int) -> dict:
    model = build(members.gpt(d_model=128, vocab_size=256, dropout=0.0, heads=dict(n_heads=4),
                              depth=dict(n_layers=4), position=dict(max_len=128))).train()
    x = torch.randint(0, 256, (4, 128))
    batch = {"x": x, "y": x.roll(-1, 1)}
    by_class = hooks._hooked

    def step(lookup):
        hooks._hooked = lookup
        model.set_progress(0.5)
        model.loss(batch)[0].backward()
        model.after_step()
    try:
        return _alternate({"per_class": lambda: step(by_class), "isinstance": lambda: step(_isinstance_scan)},
                          rounds, 4)
    finally:
        hooks._hooked = by_class


def dropout_ab(rounds: int) -> dict:
    model = build(members.gpt(d_model=256, vocab_size=256, dropout=0.0, heads=dict(n_heads=4),
                              depth=dict(n_layers=6), position=dict(max_len=1024))).eval()
    with_dropout = copy.deepcopy(model)

    def put_back(mod):
        for name, child in mod.named_children():
            if isinstance(child, nn.Identity):
                setattr(mod, name, nn.Dropout(0.0))
            else:
                put_back(child)
    put_back(with_dropout)
    prompt = torch.randint(0, 256, (1, 16))
    per_token = lambda m: generate(m, prompt, 200, greedy=True)  # noqa: E731
    ms = _alternate({"no_dropout_modules": lambda: per_token(model),
                     "dropout_0_modules": lambda: per_token(with_dropout)}, max(2, rounds // 3), 1)
    return {k: v / 200 for k, v in ms.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    h = hooks_ab(args.rounds)
    print(f"demo step, ms (median): hooks per class {h['per_class']:.2f}, isinstance scan {h['isinstance']:.2f}")
    d = dropout_ab(args.rounds)
    print(f"decoding, ms per token (median): without Dropout(0) {d['no_dropout_modules']:.3f}, "
          f"with {d['dropout_0_modules']:.3f}")


if __name__ == "__main__":
    main()
