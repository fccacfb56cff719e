"""Recipe against references: the ``gpt`` member, a flat GPT written to nanoGPT's definition
and Hugging Face's ``GPT2LMHeadModel``, each with its own initialisation, trained by one loop
on identical batches, alternating step by step; validation loss at equal steps and equal time.

The loop is nanoGPT's ``train_shakespeare_char`` recipe: AdamW with decay on tensors of two
or more dimensions (``train/optim.param_groups``), linear warm-up then cosine to a tenth of
the peak (``train/optim.WarmupCosine``), gradient clipping at 1, random windows of the
training split (the same windows for every model of a seed). Validation covers the whole
validation split in non-overlapping windows. The defaults are the CPU proxy: d 128, 4
layers, 4 heads, context 128, batch 16, 800 steps, one thread.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..train.optim import WarmupCosine, param_groups
from .results import check_model_args, print_rows, write_rows
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

MODELS = ("tfamily", "nanogpt", "hf-gpt2")
FIELDS = ["model", "seed", "step", "train_loss", "val_loss", "train_s", "dropout", "d_model", "n_layers",
          "n_heads", "seq_len", "batch", "device", "precision"]


@dataclass
class Settings:
    """`tfamily bench recipe`."""
    models: list[str] = setting(list(MODELS), flag=True, choices=MODELS)
    seeds: list[int] = setting([0, 1, 2], flag=True)
    d_model: int = setting(128, flag=True, lo=0)
    layers: int = setting(4, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    seq_len: int = setting(128, flag=True, lo=0)
    batch: int = setting(16, flag=True, lo=0)
    steps: int = setting(800, flag=True, lo=0)
    dropout: float = setting(0.2, flag=True)
    member_choices: str = setting("gpt2", flag=True, choices=("gpt2", "nanogpt"),
                                  help="the tfamily member's model choices: gpt2 (biases, tanh GELU: the member's "
                                       "own) or nanogpt (no biases, exact GELU: the flat peer's, so a step-time "
                                       "ratio shows the member's overhead)")
    lr: float = setting(1e-3, flag=True)
    warmup: int = setting(100, flag=True, lo=0)
    weight_decay: float = setting(0.1, flag=True)
    eval_every: int = setting(200, flag=True, lo=0, help="steps between validation passes")
    corpus: str = setting("tinyshakespeare", flag=True, help="a corpus name or a text file (character vocab)")
    device: str = setting("cpu", flag=True)
    precision: str = setting("fp32", flag=True, choices=("fp32", "bf16"), help="bf16: autocast")
    compile: bool = setting(False, flag=True, help="torch.compile each model's loss; the compiling first step is "
                                                   "not counted as training time")
    threads: int = setting(1, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/bench/recipe", flag=True, help="directory for recipe.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the summary as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def build_model(name: str, vocab: int, args) -> torch.nn.Module:
    """One model with its own initialisation, from the global RNG (seeded by the caller)."""
    if name == "tfamily":
        from .. import members
        from ..build import build
        choices = dict(bias=False, ff=dict(activation="gelu")) if args.member_choices == "nanogpt" else {}
        return build(members.gpt(d_model=args.d_model, vocab_size=vocab, dropout=args.dropout,
                                 heads=dict(n_heads=args.heads), depth=dict(n_layers=args.layers),
                                 position=dict(max_len=args.seq_len), **choices))
    if name == "nanogpt":
        from .flat_gpt import FlatGPT
        # nanoGPT's train_shakespeare_char: bias=False (LayerNorms too), exact GELU.
        return FlatGPT(vocab, args.d_model, args.layers, args.heads, args.heads, args.seq_len,
                       bias=False, approximate="none", dropout=args.dropout)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ModuleNotFoundError as e:
        raise ValueError("--models hf-gpt2 needs transformers (pip install -c constraints.txt -e '.[peers]'); "
                         "or leave it out of --models") from e
    cfg = GPT2Config(vocab_size=vocab, n_positions=args.seq_len, n_embd=args.d_model, n_layer=args.layers,
                     n_head=args.heads, resid_pdrop=args.dropout, embd_pdrop=args.dropout,
                     attn_pdrop=args.dropout, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg)


def logits_of(name: str, model, x):
    if name == "hf-gpt2":
        return model(input_ids=x, use_cache=False).logits
    return model(x)


class Run:
    """One model of one seed: its optimiser, schedule and (optionally compiled) loss."""

    def __init__(self, name: str, seed: int, vocab: int, args, device: torch.device):
        torch.manual_seed(seed)
        self.name, self.seed = name, seed
        self.model = build_model(name, vocab, args).to(device)
        self.opt = torch.optim.AdamW(param_groups(self.model, args.weight_decay), lr=args.lr, betas=(0.9, 0.99))
        self.schedule = WarmupCosine(args.warmup, args.steps, 0.1)
        self.lr, self.device, self.train_s, self.compile_s = args.lr, device, 0.0, None
        self.compiled = args.compile
        self.autocast = args.precision == "bf16"

        def loss(x, y):
            logits = logits_of(name, self.model, x)
            return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        self.loss = torch.compile(loss) if args.compile else loss

    def step(self, i: int, x, y) -> float:
        self.model.train()
        for g in self.opt.param_groups:
            g["lr"] = self.lr * self.schedule(i)
        t0 = time.perf_counter()
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast):
            loss = self.loss(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        value = float(loss.detach())  # the host read ends the step on every device
        if self.compiled and i == 0:  # compilation, once: kept apart, as `tfamily train` does
            self.compile_s = time.perf_counter() - t0
        else:
            self.train_s += time.perf_counter() - t0
        return value

    @torch.no_grad()
    def evaluate(self, windows: torch.Tensor, batch: int) -> float:
        self.model.eval()
        total, count = 0.0, 0
        for chunk in windows.split(batch):
            x, y = chunk[:, :-1].to(self.device), chunk[:, 1:].to(self.device)
            with torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast):
                logits = logits_of(self.name, self.model, x)
            total += float(F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum"))
            count += y.numel()
        return total / count


def val_windows(val: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The whole validation split as non-overlapping (seq_len + 1)-token windows."""
    n = (len(val) - 1) // seq_len
    if n < 1:
        raise ValueError(f"the validation split has {len(val)} tokens, fewer than --seq-len + 1 = {seq_len + 1}; "
                         f"lower --seq-len or use a longer corpus")
    idx = torch.arange(n)[:, None] * seq_len + torch.arange(seq_len + 1)
    return val[idx]


def train_windows(train: torch.Tensor, seq_len: int, batch: int, steps: int, seed: int) -> torch.Tensor:
    """(steps, batch) window starts, the same for every model of a seed."""
    if len(train) <= seq_len + 1:
        raise ValueError(f"the training split has {len(train)} tokens, too few for --seq-len {seq_len}")
    g = torch.Generator().manual_seed(10_000 + seed)
    return torch.randint(len(train) - seq_len - 1, (steps, batch), generator=g)


def run_seed(seed: int, args, train, val_w, vocab: int, device: torch.device) -> list[dict]:
    runs = [Run(name, seed, vocab, args, device) for name in args.models]
    starts = train_windows(train, args.seq_len, args.batch, args.steps, seed)
    offsets = torch.arange(args.seq_len + 1)
    rows = []
    base = dict(seed=seed, dropout=args.dropout, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                seq_len=args.seq_len, batch=args.batch, device=device.type, precision=args.precision)
    for r in runs:  # step 0: the initialisation's own loss, where the time curves start
        rows.append(dict(base, model=r.name, step=0, train_loss=None, val_loss=round(r.evaluate(val_w, args.batch * 4), 5),
                         train_s=0.0))
    for i in range(args.steps):
        win = train[starts[i][:, None] + offsets]
        x, y = win[:, :-1].to(device), win[:, 1:].to(device)
        # Alternating step by step, so a slow phase of the machine costs every model alike.
        losses = [r.step(i, x, y) for r in runs]
        for loss in losses:
            if not math.isfinite(loss):
                raise ValueError(f"seed {seed} step {i}: a non-finite training loss ({loss}); lower --lr")
        last = i + 1 == args.steps
        if (i + 1) % args.eval_every == 0 or last:
            for r, loss in zip(runs, losses):
                rows.append(dict(base, model=r.name, step=i + 1, train_loss=round(loss, 5),
                                 val_loss=round(r.evaluate(val_w, args.batch * 4), 5), train_s=round(r.train_s, 3)))
            print(f"seed {seed} step {i + 1}/{args.steps}: " +
                  ", ".join(f"{r['model']} {r['val_loss']:.4f} ({r['train_s']:.1f} s)" for r in rows[-len(runs):]),
                  flush=True)
    return rows


def val_at_time(rows: list[dict], model: str, seed: int, t: float) -> float:
    """``model``'s validation loss after ``t`` seconds of training, linear between evaluations."""
    pts = sorted((r["train_s"], r["val_loss"]) for r in rows if r["model"] == model and r["seed"] == seed)
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return pts[-1][1]


def summarize(rows: list[dict], models: list[str], seeds: list[int]) -> list[dict]:
    """Per model: mean and spread of the final validation loss over seeds, and the mean at
    equal time: at the training time of the model that finished first (per seed)."""
    last_step = max(r["step"] for r in rows)
    out = []
    budgets = {s: min(max(r["train_s"] for r in rows if r["model"] == m and r["seed"] == s) for m in models)
               for s in seeds}
    for m in models:
        final = [r["val_loss"] for r in rows if r["model"] == m and r["step"] == last_step]
        timed = [val_at_time(rows, m, s, budgets[s]) for s in seeds]
        secs = [r["train_s"] for r in rows if r["model"] == m and r["step"] == last_step]
        out.append(dict(model=m, seeds=len(final), val_at_steps=round(statistics.fmean(final), 4),
                        val_min=min(final), val_max=max(final),
                        val_at_equal_time=round(statistics.fmean(timed), 4),
                        ms_per_step=round(1000 * statistics.fmean(secs) / last_step, 2), steps=last_step))
    return out


def plot(rows: list[dict], models: list[str], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for m in models:
        steps = sorted({r["step"] for r in rows if r["model"] == m})
        mean_val = [statistics.fmean(r["val_loss"] for r in rows if r["model"] == m and r["step"] == s) for s in steps]
        mean_t = [statistics.fmean(r["train_s"] for r in rows if r["model"] == m and r["step"] == s) for s in steps]
        axes[0].plot(steps, mean_val, marker="o", label=m)
        axes[1].plot(mean_t, mean_val, marker="o", label=m)
    # The step-0 loss (about ln V) would squash the curves that matter: start the axis at the first evaluation.
    later = [r["val_loss"] for r in rows if r["step"] > 0]
    if later:
        for ax in axes:
            ax.set_ylim(min(later) - 0.02, max(later) + 0.02)
    axes[0].set(xlabel="step", ylabel="validation loss (nats/char), mean over seeds", title="equal steps")
    axes[1].set(xlabel="training seconds (evaluation excluded)", title="equal time")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    save_figure(fig, path, dpi=110)


def run(args) -> int:
    from ..data.corpora import load_corpus
    from ..train.device import resolve_device
    check_model_args(args, ("d_model", "layers", "heads", "seq_len", "batch", "steps", "eval_every"))
    if not 0 <= args.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    corpus = load_corpus(args.corpus, vocab="char")
    train, val = corpus.split("train").long(), corpus.split("val").long()
    vocab = corpus.vocab.size
    print(f"recipe: {', '.join(args.models)} on {corpus.name} ({vocab} chars), d {args.d_model} x{args.layers}, "
          f"{args.heads} heads, context {args.seq_len}, batch {args.batch}, {args.steps} steps, dropout "
          f"{args.dropout}, seeds {args.seeds}, {device.type} {args.precision}, threads {torch.get_num_threads()}",
          flush=True)
    val_w = val_windows(val, args.seq_len)
    rows = [r for seed in args.seeds for r in run_seed(seed, args, train, val_w, vocab, device)]
    out = write_rows(args.out, "recipe", rows, FIELDS)
    summary = summarize(rows, args.models, args.seeds)
    write_rows(out, "recipe_summary", summary, list(summary[0]))
    plot(rows, args.models, out / "recipe.png")
    print_rows(summary, [("model", "model", "<9"), ("val_at_steps", "val@steps", ">10.4f"),
                         ("val_min", "min", ">8.4f"), ("val_max", "max", ">8.4f"),
                         ("val_at_equal_time", "val@time", ">9.4f"), ("ms_per_step", "ms/step", ">8.2f")],
               args.json)
    print(f"rows, summary and plot in {out}/")
    return 0
