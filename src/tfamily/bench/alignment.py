"""`tfamily plot alignment RUN --text TEXT --out FILE`: the attention weights of a recurrent
encoder-decoder, target step (rows) over source position (columns), drawn as Bahdanau et al.
2015 (figure 3) and Luong et al. 2015 (figure 7) draw them: gray levels, white = weight 1.

The source is ``--text`` (a run trained on text, encoded with its vocabulary) or ``--ids``
(space-separated token ids, for the synthetic tasks). The model decodes it greedily (or
teacher-forced on ``--target-ids``); the weights of that decode are plotted and written as
JSON next to the PNG.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.generate import greedy_decode
from ..models.rnn_encdec import RNNEncoderDecoder
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily plot alignment RUN`."""
    checkpoint: str = setting(None, positional="RUN",
                              help="a run or checkpoint directory of a recurrent encoder-decoder "
                                   "with attention (members luong_attention, bahdanau_attention)")
    text: str | None = setting(None, flag=True, help="source text (runs trained on text)")
    ids: str | None = setting(None, flag=True,
                              help="space-separated source token ids (runs trained on synthetic tasks)")
    target_ids: str | None = setting(None, flag=True,
                                     help="teacher-force this target (space-separated ids) instead of decoding")
    bos: int | None = setting(None, flag=True, lo=0, help="start id (default: vocab_size - 2, the pair tasks' BOS)")
    eos: int | None = setting(None, flag=True, lo=0, help="end id (default: vocab_size - 1, the pair tasks' EOS)")
    max_len: int = setting(64, flag=True, lo=0, help="longest target to decode")
    out: str = setting("runs/plots/alignment.png", flag=True, help="PNG file to write")
    json: bool = setting(False, flag=True, help="print the weights as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def _ids(text: str, what: str, vocab_size: int) -> list[int]:
    try:
        vals = [int(t) for t in text.split()]
    except ValueError:
        raise ValueError(f"{what} must be space-separated integers, got {text!r}") from None
    bad = [v for v in vals if not 0 <= v < vocab_size]
    if not vals or bad:
        raise ValueError(f"{what} needs token ids in 0..{vocab_size - 1}, got {text!r}")
    return vals


def source(tr, text: str | None, ids: str | None) -> tuple[list[int], list[str]]:
    if (text is None) == (ids is None):
        raise ValueError("give exactly one of --text (a run trained on text) or --ids (space-separated token ids)")
    if ids is not None:
        vals = _ids(ids, "--ids", tr.spec.vocab_size)
        return vals, [str(v) for v in vals]
    if tr.vocab is None:
        raise ValueError(f"{tr.path} was trained on a synthetic task, which has no text vocabulary; use --ids '3 1 4'")
    if not text:
        raise ValueError("--text is empty; give at least one character")
    x = tr.vocab.encode(text)
    return x.tolist(), [tr.vocab.decode(x[i:i + 1]) for i in range(len(x))]


def label(tr, token: int, bos: int, eos: int) -> str:
    if token == eos:
        return "<eos>"
    if tr.vocab is not None and token < tr.vocab.size:
        return tr.vocab.decode(torch.tensor([token]))
    return str(token)


@torch.no_grad()
def alignment(model: RNNEncoderDecoder, src: list[int], *, bos: int, eos: int, max_len: int,
              target: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
    """(target ids after BOS, weights (n, m)) for one source: greedy decoding unless ``target``."""
    s = torch.tensor([src])
    if target is None:
        target = greedy_decode(model, s, bos=bos, eos=eos, max_len=max_len)[0, 1:].tolist()
        target = target[:target.index(eos) + 1] if eos in target else target
    weights = model.alignments(s, torch.tensor([[bos, *target[:-1]]]) if target else torch.tensor([[bos]]))
    return target, weights[0]


def plot(weights: torch.Tensor, src_labels: list[str], tgt_labels: list[str], path: Path, title: str) -> None:
    plt = pyplot()
    n, m = weights.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * m + 1.5), max(3.0, 0.35 * n + 1.2)))
    ax.imshow(weights.numpy(), cmap="gray", vmin=0.0, vmax=1.0, aspect="equal")
    ax.xaxis.tick_top()
    ax.set_xticks(range(m), [repr(c)[1:-1] for c in src_labels], rotation=90, fontsize=8)
    ax.set_yticks(range(n), [repr(c)[1:-1] for c in tgt_labels], fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    ax.set_title(title, fontsize=9, pad=24)
    save_figure(fig, path, dpi=100)


def run(args) -> int:
    from ..train.sample import load_trained
    tr = load_trained(args.checkpoint, "cpu")
    if not isinstance(tr.model, RNNEncoderDecoder) or tr.model.decoder.score is None:
        raise ValueError(f"{args.checkpoint} ({tr.spec.member}) has no recurrent attention to draw; train a "
                         f"recurrent encoder-decoder with an alignment score (member luong_attention or "
                         f"bahdanau_attention)")
    v = tr.spec.vocab_size
    bos = args.bos if args.bos is not None else v - 2
    eos = args.eos if args.eos is not None else v - 1
    for name, value in (("--bos", bos), ("--eos", eos)):
        if not 0 <= value < v:
            raise ValueError(f"{name}={value} is outside the vocabulary 0..{v - 1}")
    if args.max_len < 1:
        raise ValueError(f"--max-len must be >= 1, got {args.max_len}")
    src, src_labels = source(tr, args.text, args.ids)
    target = _ids(args.target_ids, "--target-ids", v) if args.target_ids is not None else None
    target, weights = alignment(tr.model, src, bos=bos, eos=eos, max_len=args.max_len, target=target)
    tgt_labels = [label(tr, t, bos, eos) for t in target]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    d = tr.spec.depth.params
    plot(weights, src_labels, tgt_labels, out, f"{tr.spec.member} ({d.get('alignment', 'general')}, "
                                               f"{d.get('attend', 'luong')}) at step {tr.meta['step']}")
    result = {"checkpoint": str(tr.path), "step": tr.meta["step"], "source": src_labels, "target": tgt_labels,
              "weights": [[round(w, 6) for w in row] for row in weights.tolist()]}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"alignment of {len(tgt_labels)} target x {len(src_labels)} source tokens: {out}")
    return 0
