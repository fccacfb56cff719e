"""`tfamily plot spans CHECKPOINT --out FILE`: the learned attention span of every head
in every layer of an adaptive-span model (Sukhbaatar et al. 2019, figure 3), with the
attention FLOPs the spans save.

Attention cost per query is proportional to the keys it touches. With spans, head h
touches min(S, ceil(z_h + R)) keys instead of S (``flops_fraction_heads``, what a per-head
kernel would pay); our trimming cuts keys per layer at the largest span plus the
ramp, so the executed fraction is reach / S (``flops_fraction_executed``). Both are
relative to the full span S = max_span. The numbers are also written as JSON next
to the figure (FILE with suffix .json) and printed with --json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..nn.patterns import AdaptiveSpan
from ..base.plotting import pyplot
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily plot spans CHECKPOINT`."""
    checkpoint: str = setting(None, positional="CHECKPOINT",
                              help="a run or checkpoint directory of an adaptive-span model")
    out: str = setting("runs/plots/spans.png", flag=True, help="PNG file to write")
    json: bool = setting(False, flag=True, help="print the per-layer spans as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def span_layers(model: nn.Module) -> list[nn.Module]:
    """The adaptive-span patterns of a model, in layer order."""
    return [m for m in model.modules() if isinstance(m, AdaptiveSpan)]


def span_stats(model: nn.Module) -> list[dict]:
    """Per layer: spans per head, their mean, the layer's reach and the FLOPs fractions."""
    rows = []
    for i, span in enumerate(span_layers(model)):
        z = span.spans().detach().float().clamp(0, span.max_span)
        touched = torch.tensor([span.reach(float(v)) for v in z], dtype=torch.float32)  # keys with weight > 0
        rows.append({"layer": i, "max_span": span.max_span, "ramp": span.ramp, "dynamic": span.dynamic,
                     "spans": [round(float(v), 2) for v in z], "mean_span": float(z.mean()),
                     "reach": span.reach(), "flops_fraction_heads": float(touched.mean() / span.max_span),
                     "flops_fraction_executed": span.reach() / span.max_span})
    return rows


def summary(rows: list[dict]) -> dict:
    n = max(len(rows), 1)
    return {"mean_span": sum(r["mean_span"] for r in rows) / n,
            "flops_saved_heads": 1 - sum(r["flops_fraction_heads"] for r in rows) / n,
            "flops_saved_executed": 1 - sum(r["flops_fraction_executed"] for r in rows) / n}


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib.pyplot as plt
    fig = figure(rows, title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def figure(rows: list[dict], title: str):
    """Bars per head and layer. Learned spans are often a few percent of S (tens of tokens against
    8,192), so when S is over 10x the largest span the axis is logarithmic (linear below 1 token, as
    spans can be 0) and the spans stay readable beside the max-span line."""
    plt = pyplot()
    n_layers, n_heads = len(rows), len(rows[0]["spans"])
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * n_layers * n_heads / 4), 4))
    width = 0.8 / n_heads
    for h in range(n_heads):
        xs = [r["layer"] - 0.4 + (h + 0.5) * width for r in rows]
        ax.bar(xs, [r["spans"][h] for r in rows], width=width, color=plt.cm.viridis(h / max(n_heads - 1, 1)))
    ax.plot([r["layer"] for r in rows], [r["mean_span"] for r in rows], "k.--", label="mean over heads")
    ax.axhline(rows[0]["max_span"], color="grey", lw=0.8, ls=":", label="max span S")
    ax.set_xticks([r["layer"] for r in rows])
    ax.set_xlabel("layer")
    largest = max(max(r["spans"]) for r in rows)
    if rows[0]["max_span"] > 10 * max(largest, 1.0):
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylabel("learned span z (tokens, log scale)")
    else:
        ax.set_ylabel("learned span z (tokens)")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def run(args) -> int:
    from ..train.sample import load_trained
    tr = load_trained(args.checkpoint, "cpu")
    rows = span_stats(tr.model)
    if not rows:
        raise ValueError(f"{args.checkpoint} ({tr.spec.member}, pattern {tr.spec.pattern.name!r}) has no "
                         f"adaptive spans; train a model with pattern 'adaptive_span' (member adaptive_span)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(rows, out, f"{tr.spec.member}: learned spans at step {tr.meta['step']}")
    result = {"checkpoint": str(tr.path), "step": tr.meta["step"], "layers": rows, **summary(rows)}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in rows:
            print(f"layer {r['layer']:>2}: mean span {r['mean_span']:8.1f}  reach {r['reach']:>6}  "
                  f"spans {r['spans']}")
        print(f"attention FLOPs saved vs S: {100 * result['flops_saved_heads']:.1f}% per head, "
              f"{100 * result['flops_saved_executed']:.1f}% as executed; plot: {out}")
    return 0
