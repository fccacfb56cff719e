"""Training step of tfamily vs its peers: x-transformers (optional extra ``peers``) and the
flat GPT (``bench/flat_gpt.py``: fused QKV, SDPA), same shapes, fp32 and bf16 autocast.

One step is forward, cross-entropy, backward, gradient clipping at 1 and fused AdamW.
Timing alternates: every round runs a few steps of every (model, precision) cell in turn,
so a machine that slows down mid-run slows every cell alike; only ratios within one run
mean anything on a shared machine. Each cell's rate is its tokens over its summed time.

Model FLOPs per token are one number per shape, the same for every model (so the
fraction of peak compares useful work, not each model's extras): Chowdhery et al. 2022
(PaLM), appendix B, 6 N + 12 L d T, where N is the tfamily GPT's parameter count less its
position table (looked up, not multiplied), L layers, d = d_model and T the sequence length.
The peak is a large square matmul in the same precision, timed in every round beside the
models (so a load that changes during the run moves the peak with them);
``fraction_of_peak`` = model FLOPs x tokens/s / that rate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .results import check_model_args, print_rows, write_rows
from .devices import sync
from .train import flops_per_token
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

FIELDS = ["shape", "model", "precision", "best", "device", "threads", "params", "flops_per_token", "step_ms",
          "tokens_per_s", "model_gflops", "peak_gflops", "fraction_of_peak", "vs_tfamily", "steps", "d_model",
          "n_layers", "n_heads", "seq_len", "batch", "vocab", "note"]
SHAPES = {  # name: (d_model, n_layers, n_heads, seq_len, batch)
    "demo": (128, 4, 4, 128, 4),
    "bench": (256, 6, 4, 256, 16),
    "large": (512, 8, 8, 1024, 4),
}
MODELS = ("tfamily", "x-transformers", "flat")
COMPILED = ("tfamily-compiled", "flat-compiled")  # on request: torch.compile (Inductor) of the whole loss


@dataclass(frozen=True)
class Shape:
    name: str
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    batch: int
    vocab: int


def parse_shape(text: str, vocab: int) -> Shape:
    """A preset name (demo, bench, large) or ``D:LAYERS:HEADS:SEQ:BATCH``."""
    if text in SHAPES:
        return Shape(text, *SHAPES[text], vocab)
    parts = text.split(":")
    if len(parts) != 5 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--shapes {text!r}: use a preset ({', '.join(SHAPES)}) or D:LAYERS:HEADS:SEQ:BATCH "
                         f"with positive integers, e.g. 64:2:2:32:2")
    d, layers, heads, seq, batch = map(int, parts)
    if d % heads:
        raise ValueError(f"--shapes {text!r}: d_model {d} must be divisible by heads {heads}")
    return Shape(text, d, layers, heads, seq, batch, vocab)


@dataclass
class Settings:
    """`tfamily bench peers`."""
    shapes: list[str] = setting(list(SHAPES), flag=True,
                                help="presets demo (d128 x4, seq 128, batch 4), bench (d256 x6, seq 256, batch 16), "
                                     "large (d512 x8, seq 1024, batch 4), or D:LAYERS:HEADS:SEQ:BATCH")
    skip_large: bool = setting(False, flag=True, help="leave out the large preset")
    models: list[str] = setting(list(MODELS), flag=True, choices=MODELS + COMPILED,
                                help="the compiled variants wrap the loss in torch.compile; their first step compiles "
                                     "(tens of seconds) and is not timed")
    precisions: list[str] | None = setting(None, flag=True, choices=("fp32", "bf16"), help="default: fp32 and bf16, "
                                           "or fp32 alone on a CPU that emulates bf16 (about 30x slower)")
    vocab: int = setting(256, flag=True, lo=0)
    rounds: int = setting(4, flag=True, lo=0, help="alternation rounds")
    steps: int = setting(3, flag=True, lo=0, help="timed steps per cell per round")
    matmul_size: int = setting(1024, flag=True, lo=0)
    device: str = setting("auto", flag=True)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/bench/peers", flag=True, help="directory for peers.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def _tfamily(s: Shape):
    from .. import members
    from ..build import build
    spec = members.gpt(d_model=s.d_model, vocab_size=s.vocab, dropout=0.0, heads=dict(n_heads=s.n_heads),
                       depth=dict(n_layers=s.n_layers), position=dict(max_len=s.seq_len))
    model = build(spec)
    return model, lambda batch: model.loss(batch)[0]


def _xtransformers(s: Shape):
    from x_transformers import Decoder, TransformerWrapper
    # attn_flash: its SDPA path (the fastest it has); a tied head like tfamily's GPT.
    model = TransformerWrapper(num_tokens=s.vocab, max_seq_len=s.seq_len, tie_embedding=True,
                               attn_layers=Decoder(dim=s.d_model, depth=s.n_layers, heads=s.n_heads, attn_flash=True))
    return model, lambda batch: _ce(model(batch["x"]), batch["y"])


def _flat(s: Shape):
    from .flat_gpt import FlatGPT
    model = FlatGPT(s.vocab, s.d_model, s.n_layers, s.n_heads, s.n_heads, s.seq_len)
    return model, lambda batch: _ce(model(batch["x"]), batch["y"])


def _ce(logits, y):
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def _compiled(builder):
    def make(s: Shape):
        model, loss_fn = builder(s)
        return model, torch.compile(loss_fn)
    return make


BUILDERS = {"tfamily": _tfamily, "x-transformers": _xtransformers, "flat": _flat,
            "tfamily-compiled": _compiled(_tfamily), "flat-compiled": _compiled(_flat)}


def peer_missing(name: str) -> str | None:
    """A one-line note when a peer's package is not installed, else None."""
    if name != "x-transformers":
        return None
    try:
        import x_transformers  # noqa: F401
    except ModuleNotFoundError:
        return "x-transformers is not installed (pip install -c constraints.txt -e '.[peers]'): rows skipped"
    return None


def default_precisions(device: torch.device) -> list[str]:
    from ..train.device import cpu_has_bf16
    if device.type == "cpu" and not cpu_has_bf16():
        print("bf16 is emulated on this CPU (no avx512_bf16/amx_bf16): fp32 only; --precisions bf16 to time it anyway")
        return ["fp32"]
    return ["fp32", "bf16"]


class Cell:
    """One model in one precision: its step, summed time and step count."""

    def __init__(self, name: str, model, loss_fn, opt, precision: str, device: torch.device, batch: dict):
        self.name, self.model, self.loss_fn, self.opt = name, model, loss_fn, opt
        self.precision, self.device, self.batch = precision, device, batch
        self.seconds, self.steps = 0.0, 0

    def step(self) -> None:
        from ..train.device import autocast
        with autocast(self.device, self.precision):
            loss = self.loss_fn(self.batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def timed(self, steps: int) -> None:
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(self.device)
        self.seconds += time.perf_counter() - t0
        self.steps += steps


class PeakCell:
    """An (n x n) @ (n x n) matmul in one precision, timed like a model cell: 2 n^3 FLOPs each."""

    def __init__(self, n: int, precision: str, device: torch.device):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        self.a, self.b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        self.flops, self.device, self.seconds = 2 * n ** 3, device, 0.0
        self.reps = 0
        self.a @ self.b

    def timed(self, reps: int) -> None:
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(reps):
            self.a @ self.b
        sync(self.device)
        self.seconds += time.perf_counter() - t0
        self.reps += reps

    @property
    def gflops(self) -> float:
        return self.flops * self.reps / self.seconds / 1e9


def bench_shape(s: Shape, args, device: torch.device) -> list[dict]:
    from ..train.optim import adamw
    common = {"shape": s.name, "device": str(device), "threads": torch.get_num_threads(), "d_model": s.d_model,
              "n_layers": s.n_layers, "n_heads": s.n_heads, "seq_len": s.seq_len, "batch": s.batch, "vocab": s.vocab}
    rows, cells, fpt = [], [], None
    x = torch.randint(0, s.vocab, (s.batch, s.seq_len), device=device)
    batch = {"x": x, "y": x.roll(-1, dims=1)}
    for name in args.models:
        note = peer_missing(name)
        if note:
            rows.append({"model": name, "note": note, **common})
            continue
        torch.manual_seed(0)
        model, loss_fn = BUILDERS[name](s)
        model.to(device).train()
        if name == "tfamily":
            fpt = flops_per_token(model, s.n_layers, s.d_model, s.seq_len)
        opt = adamw(model, 1e-4, 0.1)
        for prec in args.precisions:
            cells.append(Cell(name, model, loss_fn, opt, prec, device, batch))
    if fpt is None:  # tfamily left out: the same formula on its model, built only to count
        fpt = flops_per_token(_tfamily(s)[0], s.n_layers, s.d_model, s.seq_len)
    for c in cells:
        c.step()  # warm-up: allocations, lazy optimiser state, autocast caches
    peak_cells = {p: PeakCell(args.matmul_size, p, device) for p in args.precisions}
    for _ in range(args.rounds):
        for c in cells:
            c.timed(args.steps)
        for pc in peak_cells.values():
            pc.timed(args.steps)
    peaks = {p: pc.gflops for p, pc in peak_cells.items()}
    tokens = s.batch * s.seq_len
    for c in cells:
        dt = c.seconds / c.steps
        tps = tokens / dt
        rows.append({"model": c.name, "precision": c.precision, "params": sum(p.numel() for p in c.model.parameters()),
                     "flops_per_token": fpt, "step_ms": dt * 1e3, "tokens_per_s": tps, "model_gflops": fpt * tps / 1e9,
                     "peak_gflops": peaks[c.precision], "fraction_of_peak": fpt * tps / 1e9 / peaks[c.precision],
                     "steps": c.steps, **common})
    _mark(rows)
    return rows


def _mark(rows: list[dict]) -> None:
    """``best``: each model's faster precision; ``vs_tfamily``: tokens/s over tfamily's in the
    same precision."""
    timed = [r for r in rows if "tokens_per_s" in r]
    for r in timed:
        same = [q["tokens_per_s"] for q in timed if q["model"] == r["model"]]
        r["best"] = r["tokens_per_s"] == max(same)
        ours = [q["tokens_per_s"] for q in timed if q["model"] == "tfamily" and q["precision"] == r["precision"]]
        r["vs_tfamily"] = r["tokens_per_s"] / ours[0] if ours else None


def run(args) -> int:
    from ..train.device import resolve_device
    check_model_args(args, ("vocab", "rounds", "steps", "matmul_size"))
    shapes = [parse_shape(t, args.vocab) for t in args.shapes if not (args.skip_large and t == "large")]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.precisions is None:
        args.precisions = default_precisions(device)
    rows = [r for s in shapes for r in bench_shape(s, args, device)]
    out = write_rows(args.out, "peers", rows, FIELDS)
    plot(rows, out / "peers.png")
    for note in sorted({r["note"] for r in rows if r.get("note")}):
        print(note)
    timed = [r for r in rows if "tokens_per_s" in r]
    print_rows(timed, [("shape", "shape", "<8"), ("model", "model", "<15"), ("precision", "prec", "<5"),
                       ("tokens_per_s", "tokens/s", ">10.0f"), ("step_ms", "step ms", ">9.1f"),
                       ("fraction_of_peak", "of peak", ">8.3f"), ("vs_tfamily", "vs tfamily", ">10.3f")],
               args.json)
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """Grouped bars: tokens/s per shape (one panel each), models x precisions."""
    plt = pyplot()
    timed = [r for r in rows if "tokens_per_s" in r]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    fig, axes = plt.subplots(1, max(1, len(shapes)), figsize=(4.2 * max(1, len(shapes)), 3.6), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        mine = [r for r in timed if r["shape"] == shape]
        labels = [f"{r['model']}\n{r['precision']}" for r in mine]
        colors = ["tab:blue" if r["model"] == "tfamily" else "tab:gray" if r["model"] == "flat" else "tab:orange"
                  for r in mine]
        ax.bar(range(len(mine)), [r["tokens_per_s"] for r in mine], color=colors,
               hatch=None, edgecolor=["black" if r.get("best") else "none" for r in mine])
        ax.set_xticks(range(len(mine)), labels, fontsize=7)
        ax.set_ylabel("training tokens/s")
        r0 = next(r for r in rows if r["shape"] == shape)
        ax.set_title(f"{shape}: d{r0['d_model']} x{r0['n_layers']}, seq {r0['seq_len']}, batch {r0['batch']}",
                     fontsize=9)
    save_figure(fig, path, dpi=110)
