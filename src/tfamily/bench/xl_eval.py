"""Transformer-XL evaluation speed: memory, segment by segment, vs the vanilla sliding window.

Dai et al. 2019, section 4.4 / table 9: a vanilla model scores each token by
re-processing a full window of the attention length ending just before it,
while Transformer-XL reuses the cached hidden states of previous segments and
processes every token once. Both evaluations here use the *same* trained model on
the *same* text and the same attention length A = mem_len + seg_len:

(a) memory: ``rows`` contiguous streams, segments of ``seg_len`` tokens, XL memory
    of ``mem_len`` layer inputs per layer (a query sees up to A keys);
(b) vanilla: for every scored token, one forward over the A tokens before it,
    batched ``rows`` windows at a time; only the last position's prediction is used.

tokens/s counts predictions made (memory predicts every token of its streams once,
vanilla one token per window). bpc is over the same targets for both: those at least
A tokens (the longest A of the run) into their stream, where the memory is full and
a vanilla window fits. The speed ratio is the paper's table 9 (363x to 1,874x on GPU
for attention lengths 800 to 3,800).
Without ``--checkpoint`` a small XL model is trained first (through the shared loop) for ``--steps``
on contiguous streams of the corpus, so the bpc values mean something.
``--device cuda`` trains and evaluates on the GPU; ``peak_mb`` is the memory each evaluation adds
(``torch.cuda.max_memory_allocated`` there, the resident high-water mark on the CPU:
bench/devices.py). Every segment or window ends in a host read of its loss, which waits for the
device, so the wall clock times the evaluation on either.
"""
from __future__ import annotations

import csv
import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..build import build
from ..data import StreamBatches, load_corpus
from ..nn.position import RelativePosition
from ..spec import Spec
from .devices import DEVICE_HELP, DEVICES, meter, resolve
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

FIELDS = ["mode", "attention_length", "seg_len", "mem_len", "rows", "tokens", "scored", "wall_s", "tokens_per_s",
          "bpc", "speedup", "peak_mb", "peak_exact", "threads", "device", "model"]


@dataclass
class Settings:
    """`tfamily bench xl-eval`."""
    checkpoint: str | None = setting(None, flag=True, metavar="DIR",
                                     help="a trained XL run or checkpoint (else train a small one)")
    corpus: str = setting("tinyshakespeare", flag=True, help="text for training and evaluation (no checkpoint)")
    data_dir: str | None = setting(None, flag=True, metavar="DIR",
                                   help="data directory (else $TFAMILY_DATA, else the user cache)")
    split: str = setting("val", flag=True, choices=("val", "test"))
    steps: int = setting(300, flag=True, lo=0, old=("--train-steps",),
                         help="steps to train the small model (no checkpoint)")
    d_model: int = setting(128, flag=True, lo=0)
    layers: int = setting(4, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    seg_len: int = setting(64, flag=True, lo=0, help="segment length (training and evaluation)")
    mem_len: int = setting(64, flag=True, lo=0, help="memory length in training")
    eval_mem_lens: list[int] | None = setting(None, flag=True, help="memory lengths to evaluate (default: --mem-len)")
    clamp_len: int | None = setting(None, flag=True, lo=0, help="evaluate with relative distances clamped to this (Dai "
                                    "et al.'s clamp_len: distances longer than any seen in training reuse the "
                                    "longest trained one)")
    tokens: int = setting(4096, flag=True, lo=0, help="target tokens scored per evaluation")
    rows: int = setting(8, flag=True, lo=0, help="streams (a) and windows per forward (b)")
    modes: list[str] = setting(["memory", "vanilla"], flag=True, choices=("memory", "vanilla"),
                               help="which evaluations to run (memory alone: bpc at several memory lengths, fast)")
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    device: str = setting("cpu", flag=True, choices=DEVICES, help=DEVICE_HELP)
    seed: int = setting(0, flag=True, lo=0)
    out: str = setting("runs/bench/xl-eval", flag=True, help="directory for xl_eval.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def small_xl(vocab_size: int, d_model: int, n_layers: int, n_heads: int, mem_len: int) -> Spec:
    from .. import members
    return members.transformer_xl(vocab_size=vocab_size, d_model=d_model, dropout=0.0,
                                  heads={"n_heads": n_heads}, depth={"n_layers": n_layers},
                                  residual={"name": "pre_norm"}, ff={"d_ff": 4 * d_model},
                                  state={"name": "xl_memory", "mem_len": mem_len})


def train_small(spec: Spec, args):
    """Train ``spec`` on contiguous streams of ``args.corpus`` (16 rows, XL memory carried from
    segment to segment and reset when the stream wraps) through the shared loop; the run's
    files go to a temporary directory. Returns the trained model."""
    from ..train.config import load
    from ..train.loop import Trainer
    with tempfile.TemporaryDirectory(prefix="xl-eval-") as run:
        cfg = load(None, {
            "member": "transformer_xl", "data.corpus": args.corpus, "data.stream": True,
            "data.seq_len": args.seg_len, "train.batch_size": 16, "train.max_steps": args.steps,
            "train.lr": 2e-3, "train.weight_decay": 0.01, "train.betas": [0.9, 0.999], "train.warmup": 20,
            "train.min_lr_ratio": 0.0, "train.grad_clip": 1.0, "train.precision": "fp32",
            "train.seed": args.seed, "train.eval_every": None, "train.eval_tokens": 1, "train.ckpt_every": None,
            "train.log_every": 50, "train.out": run, "train.tensorboard": False, "train.progress": False,
            "train.device": args.device})
        trainer = Trainer(cfg, spec=spec, data_dir=args.data_dir)
        try:
            trainer.fit()
        finally:
            trainer.close()
    return trainer.model


@torch.inference_mode()
def eval_memory(model, tokens: torch.Tensor, seg_len: int, mem_len: int, rows: int, skip: int = 0):
    """(a): ``rows`` streams of segments with memory; every token is predicted once, the
    targets at least ``skip`` tokens into their stream are scored. Returns (nll sum,
    scored targets, predictions made, seconds, scored target positions)."""
    batches = StreamBatches(tokens, seg_len, rows)
    stream_len = len(tokens) // rows
    state = model.new_state(mem_len=mem_len)
    dev = next(model.parameters()).device
    nll, made, t0 = 0.0, 0, time.perf_counter()
    for t, (x, y) in enumerate(batches):
        x, y = x.to(dev), y.to(dev)
        logits = model(x, state=state)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view_as(y)
        offset = t * seg_len + 1 + torch.arange(seg_len, device=dev)  # each target's place in its stream
        nll += loss[:, offset >= skip].sum().item()
        made += y.numel()
    wall = time.perf_counter() - t0
    offsets = torch.arange(1, batches.n_batches * seg_len + 1)
    offsets = offsets[offsets >= skip]
    positions = (torch.arange(rows)[:, None] * stream_len + offsets[None, :]).flatten()
    return nll, len(positions), made, wall, positions


@torch.inference_mode()
def eval_vanilla(model, tokens: torch.Tensor, positions: torch.Tensor, length: int, rows: int):
    """(b): each target at position p from its own forward over tokens[p - length: p],
    ``rows`` windows per call. Returns (nll sum, targets, seconds)."""
    if len(positions) and int(positions.min()) < length:
        raise ValueError(f"a vanilla window of {length} tokens needs targets at positions >= {length}")
    dev = next(model.parameters()).device
    nll, t0 = 0.0, time.perf_counter()
    windows = tokens.unfold(0, length, 1)  # row s = tokens[s: s + length]
    for i in range(0, len(positions), rows):
        p = positions[i: i + rows]
        logits = model(windows[p - length].long().to(dev))[:, -1]
        nll += F.cross_entropy(logits.float(), tokens[p].long().to(dev), reduction="sum").item()
    return nll, len(positions), time.perf_counter() - t0


def run_eval(model, tokens: torch.Tensor, seg_len: int, mem_len: int, rows: int, label: str,
             modes=("memory", "vanilla"), skip: int | None = None) -> list[dict]:
    """Both evaluations at attention length A = mem_len + seg_len, scoring the targets at
    least ``skip`` (default A) tokens into each stream: there the memory is full and a
    vanilla window of A tokens fits inside the stream."""
    length = mem_len + seg_len
    skip = length if skip is None else skip
    dev = next(model.parameters()).device
    m = meter(dev)
    base = {"attention_length": length, "seg_len": seg_len, "mem_len": mem_len, "rows": rows,
            "threads": torch.get_num_threads(), "device": dev.type, "model": label, "speedup": None}
    (nll, scored, made, wall, positions), peak, exact = m.peak_mb(
        lambda: eval_memory(model, tokens, seg_len, mem_len, rows, skip))
    if scored == 0:
        raise ValueError(f"no target is {skip} tokens into its stream; raise --tokens or lower --rows")
    out = []
    if "memory" in modes:
        out.append({"mode": "memory", **base, "tokens": made, "scored": scored, "wall_s": wall,
                    "tokens_per_s": made / wall, "bpc": nll / scored / math.log(2), "peak_mb": round(peak, 1),
                    "peak_exact": exact})
    if "vanilla" in modes:
        (nll, made, wall), peak, exact = m.peak_mb(lambda: eval_vanilla(model, tokens, positions, length, rows))
        out.append({"mode": "vanilla", **base, "tokens": made, "scored": scored, "wall_s": wall,
                    "tokens_per_s": made / wall, "bpc": nll / scored / math.log(2), "peak_mb": round(peak, 1),
                    "peak_exact": exact})
    if len(out) == 2:
        out[0]["speedup"] = out[1]["speedup"] = out[0]["tokens_per_s"] / out[1]["tokens_per_s"]
    return out


def _load(args):
    if args.checkpoint:
        from ..train.config import from_dict
        from ..train.sample import load_trained
        tr = load_trained(args.checkpoint, args.device)
        if not tr.spec.state.keeps_memory:
            raise ValueError(f"{args.checkpoint} is a {tr.spec.member!r} model with state "
                             f"{tr.spec.state.name!r}; xl-eval needs state 'xl_memory'")
        cfg = from_dict(tr.meta["config"])
        corpus = load_corpus(cfg.data.corpus, args.data_dir, vocab=tr.vocab)
        return tr.model, corpus, cfg.data.seq_len, tr.spec.state.mem_len, f"{args.checkpoint}"
    corpus = load_corpus(args.corpus, args.data_dir)
    spec = small_xl(corpus.vocab.size, args.d_model, args.layers, args.heads, args.mem_len)
    model = train_small(spec, args) if args.steps > 0 else build(spec).to(args.device)
    model.eval()
    return model, corpus, args.seg_len, args.mem_len, (f"transformer_xl d{args.d_model} L{args.layers} "
                                                       f"trained {args.steps} steps on {corpus.name}")


def run(args) -> int:
    for name in ("steps", "tokens", "rows", "seg_len", "mem_len"):
        lo = 0 if name == "steps" else 1
        if getattr(args, name) < lo:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {lo}, got {getattr(args, name)}")
    resolve(args.device)  # refuse a missing GPU before training anything
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, corpus, seg_len, mem_len, label = _load(args)  # a checkpoint brings its own lengths
    if args.clamp_len is not None:
        if args.clamp_len < 0:
            raise ValueError(f"--clamp-len must be >= 0, got {args.clamp_len}")
        for mod in model.modules():
            if isinstance(mod, RelativePosition):
                mod.clamp_len = args.clamp_len
        label += f", clamp_len {args.clamp_len}"
    text = corpus.split(args.split)
    mem_lens = args.eval_mem_lens or [mem_len]
    if min(mem_lens) < 0:
        raise ValueError(f"--eval-mem-lens must be >= 0, got {mem_lens}")
    # Every evaluation scores the same targets: those past the longest attention length in
    # each stream, about --tokens of them in all.
    skip = max(mem_lens) + seg_len
    stream_len = seg_len * math.ceil((skip + math.ceil(args.tokens / args.rows)) / seg_len) + 1
    text = text[: min(len(text), args.rows * stream_len)]
    rows_out = []
    for m in mem_lens:
        rows_out += run_eval(model, text, seg_len, m, args.rows, label, args.modes, skip)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "xl_eval.json").write_text(json.dumps(rows_out, indent=1), encoding="utf-8")
    with open(out / "xl_eval.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows_out)
    _plot(rows_out, out / "xl_eval.png")
    if args.json:
        print(json.dumps(rows_out, indent=1))
    else:
        for r in rows_out:
            ratio = f"  speedup {r['speedup']:.1f}x" if r["speedup"] else ""
            print(f"{r['mode']:<8} A={r['attention_length']:<5} {r['tokens_per_s']:>10.0f} tokens/s  "
                  f"bpc {r['bpc']:.4f}{ratio}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, color in (("memory", "tab:blue"), ("vanilla", "tab:orange")):
        mine = [r for r in rows if r["mode"] == mode]
        if mine:
            ax.plot([r["attention_length"] for r in mine], [r["tokens_per_s"] for r in mine], "o-", color=color,
                    label=mode)
    for r in rows:
        if r["mode"] == "memory" and r["speedup"]:
            ax.annotate(f"{r['speedup']:.0f}x", (r["attention_length"], r["tokens_per_s"]),
                        textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xlabel("attention length (mem_len + seg_len)")
    ax.set_ylabel("evaluation tokens / s")
    ax.set_yscale("log")
    ax.set_title("XL evaluation: memory vs re-processing windows")
    ax.legend()
    save_figure(fig, path, dpi=100)
