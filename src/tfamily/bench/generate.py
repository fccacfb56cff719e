"""Generation throughput: tfamily's KV-cached decoding vs full recomputation, and vs
Hugging Face transformers' GPT-2 ``generate`` (optional extra ``peers``) with random
weights at the same shape, greedy, at several batch sizes.

Rows are new tokens per second (batch x new tokens / seconds). Timing alternates: every
round generates once with every (model, batch) cell in turn, and a cell's rate is its
tokens over its summed time. Recomputation (the whole prefix fed again for every new
token, no cache) runs at the first batch size only: it costs O(n^2) forwards. Its row
reports whether its greedy tokens equal the cached ones (``equal_to_cache``; a tie in
the logits could differ in the last bits, so this is measured, not assumed) and the first
position where they differ.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .results import check_model_args, print_rows, write_rows
from .devices import sync
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

FIELDS = ["model", "batch", "device", "threads", "tokens_per_s", "ms_per_step", "vs_recompute", "vs_hf",
          "equal_to_cache", "first_difference", "prompt_len", "new_tokens", "rounds", "d_model", "n_layers",
          "n_heads", "vocab", "params", "note"]


@dataclass
class Settings:
    """`tfamily bench generate`."""
    d_model: int = setting(256, flag=True, lo=0)
    layers: int = setting(6, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    vocab: int = setting(256, flag=True, lo=0)
    prompt_len: int = setting(16, flag=True, lo=0)
    new_tokens: int = setting(1008, flag=True, lo=0, help="tokens generated (prompt + new = 1K by default)")
    batches: list[int] = setting([1, 8], flag=True)
    rounds: int = setting(2, flag=True, lo=0, help="alternation rounds")
    no_recompute: bool = setting(False, flag=True, help="skip the (slow) recomputation rows")
    device: str = setting("auto", flag=True)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/bench/generate", flag=True, help="directory for generate.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def hf_missing() -> str | None:
    try:
        import transformers  # noqa: F401
    except ModuleNotFoundError:
        return "transformers is not installed (pip install -c constraints.txt -e '.[peers]'): GPT-2 rows skipped"
    return None


def _tfamily(args, max_len: int):
    from .. import members
    from ..build import build
    spec = members.gpt(d_model=args.d_model, vocab_size=args.vocab, dropout=0.0, heads=dict(n_heads=args.heads),
                       depth=dict(n_layers=args.layers), position=dict(max_len=max_len))
    return build(spec).eval()


def _hf_gpt2(args, max_len: int):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging
    logging.set_verbosity_error()  # its padding advice: these prompts have no padding
    cfg = GPT2Config(vocab_size=args.vocab, n_positions=max_len, n_embd=args.d_model, n_layer=args.layers,
                     n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _hf_generate(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, use_cache=True)


def _timed(fn, device) -> tuple[torch.Tensor, float]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def run(args) -> int:
    from ..models.generate import generate
    from ..train.device import resolve_device
    check_model_args(args, ("d_model", "layers", "heads", "vocab", "prompt_len", "new_tokens", "rounds"))
    if not args.batches or min(args.batches) < 1:
        raise ValueError(f"--batches must be integers >= 1, got {args.batches}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    max_len, n = args.prompt_len + args.new_tokens, args.new_tokens
    torch.manual_seed(0)
    ours = _tfamily(args, max_len).to(device)
    note = hf_missing()
    hf = None if note else _hf_gpt2(args, max_len).to(device)
    prompts = {b: torch.randint(0, args.vocab, (b, args.prompt_len), device=device) for b in args.batches}
    cells = {(m, b): [0.0, None] for b in args.batches for m in ["tfamily-cache"] + (["hf-gpt2"] if hf else [])}
    if not args.no_recompute:
        cells[("tfamily-recompute", args.batches[0])] = [0.0, None]
    runs = {"tfamily-cache": lambda p, k: generate(ours, p, k, greedy=True),
            "tfamily-recompute": lambda p, k: generate(ours, p, k, greedy=True, use_cache=False),
            "hf-gpt2": lambda p, k: _hf_generate(hf, p, k)}
    for (m, b) in cells:  # warm-up: a short generation per cell
        runs[m](prompts[b], 2)
    equal, first = True, None
    for _ in range(args.rounds):
        for (m, b), acc in cells.items():
            out, dt = _timed(lambda: runs[m](prompts[b], n), device)
            acc[0] += dt
            acc[1] = out
        key = ("tfamily-recompute", args.batches[0])
        if key in cells:
            diff = (cells[key][1] != cells[("tfamily-cache", args.batches[0])][1]).any(0).nonzero()
            if len(diff):
                equal = False
                first = min(first if first is not None else max_len, int(diff[0]) - args.prompt_len)
    common = {"device": str(device), "threads": torch.get_num_threads(), "prompt_len": args.prompt_len,
              "new_tokens": n, "rounds": args.rounds, "d_model": args.d_model, "n_layers": args.layers,
              "n_heads": args.heads, "vocab": args.vocab}
    rows = []
    for (m, b), (seconds, _) in cells.items():
        tps = b * n * args.rounds / seconds
        model = hf if m == "hf-gpt2" else ours
        row = {"model": m, "batch": b, "tokens_per_s": tps, "ms_per_step": 1e3 * seconds / (n * args.rounds),
               "params": sum(p.numel() for p in model.parameters()), **common}
        if m == "tfamily-recompute":
            row.update(equal_to_cache=equal, first_difference=first)
        rows.append(row)
    if note:
        rows.append({"model": "hf-gpt2", "note": note, **common})
    _ratios(rows)
    out = write_rows(args.out, "generate", rows, FIELDS)
    plot(rows, out / "generate.png")
    if note:
        print(note)
    print_rows([r for r in rows if "tokens_per_s" in r],
               [("model", "model", "<18"), ("batch", "batch", ">5d"), ("tokens_per_s", "tokens/s", ">10.0f"),
                ("ms_per_step", "ms/step", ">9.2f")], args.json)
    return 0


def _ratios(rows: list[dict]) -> None:
    """``vs_recompute`` and ``vs_hf``: the cached rate over the other's at the same batch."""
    rate = {(r["model"], r["batch"]): r["tokens_per_s"] for r in rows if "tokens_per_s" in r}
    for r in rows:
        if r["model"] == "tfamily-cache":
            rec, hf = rate.get(("tfamily-recompute", r["batch"])), rate.get(("hf-gpt2", r["batch"]))
            r["vs_recompute"] = r["tokens_per_s"] / rec if rec else None
            r["vs_hf"] = r["tokens_per_s"] / hf if hf else None


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    timed = [r for r in rows if "tokens_per_s" in r]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    colors = {"tfamily-cache": "tab:blue", "tfamily-recompute": "tab:gray", "hf-gpt2": "tab:orange"}
    ax.bar(range(len(timed)), [r["tokens_per_s"] for r in timed], color=[colors[r["model"]] for r in timed])
    ax.set_xticks(range(len(timed)), [f"{r['model']}\nbatch {r['batch']}" for r in timed], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("generated tokens/s")
    if timed:
        r = timed[0]
        ax.set_title(f"greedy, d{r['d_model']} x{r['n_layers']}, {r['prompt_len']} + {r['new_tokens']} tokens",
                     fontsize=9)
    save_figure(fig, path, dpi=110)
