"""`tfamily plot ponder CHECKPOINT --text TEXT --out FILE`: how many steps a Universal
Transformer with dynamic halting spent on each position (Dehghani et al. 2019, the ponder-time
figures of section 3.1, on our tasks).

Every halting depth (``nn.depth.UniversalACT``) keeps the updates and remainders of its last
call; one forward pass over the text fills them. A decoder LM gives one row (its stack); an
encoder-decoder gives its encoder's row over the text as the source. Per position the plot shows
the ponder time N + R (t2t: updates plus remainder), the number the ponder loss averages. The
numbers are also written as JSON next to the figure and printed with --json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..models.encdec import EncoderDecoder
from ..nn.depth import UniversalACT
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily plot ponder CHECKPOINT`."""
    checkpoint: str = setting(None, positional="CHECKPOINT",
                              help="a run or checkpoint directory of a halting UT (depth universal_act)")
    text: str | None = setting(None, flag=True, help="text to ponder over (runs trained on text)")
    ids: str | None = setting(None, flag=True, help="space-separated token ids (runs trained on synthetic tasks)")
    out: str = setting("runs/plots/ponder.png", flag=True, help="PNG file to write")
    json: bool = setting(False, flag=True, help="print the ponder time per position as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def halting_depths(model: nn.Module) -> dict[str, UniversalACT]:
    """The model's halting depths by module name, in order."""
    return {name: m for name, m in model.named_modules() if isinstance(m, UniversalACT)}


@torch.no_grad()
def ponder_rows(model: nn.Module, tokens: torch.Tensor) -> list[dict]:
    """One forward pass over ``tokens`` (1, n); per halting depth its updates, remainders and
    ponder time per position, and the steps it executed."""
    depths = halting_depths(model)
    if isinstance(model, EncoderDecoder):  # the text is the source
        model.encode(tokens)
        depths = {k: v for k, v in depths.items() if k.startswith("encoder")}
    else:
        model(tokens)
    return [{"depth": name, "steps_executed": m.steps_executed, "max_steps": m.max_steps,
             "n_updates": m.n_updates[0].tolist(), "remainders": [round(r, 6) for r in m.remainders[0].tolist()],
             "ponder": (m.n_updates[0] + m.remainders[0]).tolist()} for name, m in depths.items()]


def _tokens(tr, text: str | None, ids: str | None) -> tuple[torch.Tensor, list[str]]:
    if (text is None) == (ids is None):
        raise ValueError("give exactly one of --text (a run trained on text) or --ids (space-separated token ids)")
    if text is not None:
        if tr.vocab is None:
            raise ValueError(f"{tr.path} was trained on a synthetic task, which has no text vocabulary; "
                             f"use --ids '3 1 4 1 5'")
        if not text:
            raise ValueError("--text is empty; give at least one character")
        x = tr.vocab.encode(text)
        return x[None], [tr.vocab.decode(x[i:i + 1]) for i in range(len(x))]
    try:
        vals = [int(t) for t in ids.split()]
    except ValueError:
        raise ValueError(f"--ids must be space-separated integers, got {ids!r}") from None
    vocab = tr.spec.vocab_size
    bad = [v for v in vals if not 0 <= v < vocab]
    if not vals or bad:
        raise ValueError(f"--ids needs token ids in 0..{vocab - 1}, got {ids!r}")
    return torch.tensor([vals]), [str(v) for v in vals]


def plot(rows: list[dict], labels: list[str], path: Path, title: str) -> None:
    plt = pyplot()
    data = [r["ponder"] for r in rows]
    n = len(labels)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * n), 1.2 + 0.7 * len(rows)))
    im = ax.imshow(data, aspect="auto", cmap="viridis", vmin=0, vmax=max(r["max_steps"] for r in rows))
    ax.set_yticks(range(len(rows)), [r["depth"] for r in rows])
    ax.set_xticks(range(n), [repr(c)[1:-1] for c in labels], fontsize=7, rotation=90 if n > 60 else 0)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="ponder time N + R (steps)")
    save_figure(fig, path, dpi=100)


def run(args) -> int:
    from ..compare import check_figure
    from ..train.sample import load_trained
    check_figure(args.out)  # before loading: a directory or a name without a suffix is no figure
    tr = load_trained(args.checkpoint, "cpu")
    if not halting_depths(tr.model):
        raise ValueError(f"{args.checkpoint} ({tr.spec.member}, depth {tr.spec.depth.name!r}) has no dynamic "
                         f"halting; train a model with depth 'universal_act' (member universal_transformer_lm)")
    tokens, labels = _tokens(tr, args.text, args.ids)
    rows = ponder_rows(tr.model, tokens)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(rows, labels, out, f"{tr.spec.member}: ponder time per position at step {tr.meta['step']}")
    result = {"checkpoint": str(tr.path), "step": tr.meta["step"], "tokens": labels, "depths": rows}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in rows:
            mean = sum(r["ponder"]) / len(r["ponder"])
            print(f"{r['depth']}: mean ponder {mean:.2f} of at most {r['max_steps']} steps, "
                  f"{r['steps_executed']} executed; plot: {out}")
    return 0
