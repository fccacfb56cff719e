"""The GCIDE reverse dictionary: definition -> headword, characters, at one wall-time budget.

`tfamily repro reverse-dictionary` trains each encoder-decoder on ``data.task=reverse_dictionary``
(``data/gcide.py``: cleaned senses, splits by headword, so every test headword is unseen) through
the shared loop for the same ``--time`` seconds (``train.time_budget``: training plus its final
validation loss), then decodes ``--eval-pairs`` test definitions spread evenly over the split (it
keeps the dictionary's alphabetical order) greedily and, with ``--beam K``, by beam search
(``models/generate.py``). Exact match: the decoded headword
equals the target (EOS in place); character accuracy: the share of target characters decoded
at their position. A definition shared by several headwords ("a tree") is scored against its
own headword only, so neither number can reach 1.

Models (``--models``), one width ``--d-model``: ``lstm`` (``lstm_seq2seq``, Sutskever et al. 2014,
no attention), ``luong_dot`` / ``luong_general`` / ``luong_concat`` (``luong_attention``, Luong
et al. 2015: the alignment score, input feeding), ``bahdanau`` (``bahdanau_attention``, additive,
bidirectional GRU), all with ``--rnn-layers`` layers; ``transformer`` (``vanilla``) with
``--layers`` layers per side and ``ut`` (``universal_transformer``, no ACT) with ``--layers``
recurrent steps, ``--heads`` heads and a 4x feed-forward. Same seed, data order, optimiser,
learning rate and schedule for all. Writes results.json / results.csv / results.md under ``--out``.
The models are cells of the one grid runner (``train/grid.py``): a rerun over the same ``--out``
skips a finished model, ``--shard i/n`` trains every n-th.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..bench.results import print_rows, write_rows
from ..base.numbers import check_int
from ..base.options import seconds
from ..train import grid as runner
from . import LoopRunFlags, budget
from ..settings.schema import add_flags, setting

MODELS = {  # name -> (member, spec overrides beyond the shared width)
    "lstm": ("lstm_seq2seq", {}),
    "luong_dot": ("luong_attention", {"model.depth.params.alignment": "dot"}),
    "luong_general": ("luong_attention", {"model.depth.params.alignment": "general"}),
    "luong_concat": ("luong_attention", {"model.depth.params.alignment": "concat"}),
    "bahdanau": ("bahdanau_attention", {}),
    "transformer": ("vanilla", {}),
    "ut": ("universal_transformer", {}),
}
COLUMNS = [("model", "model", "<14"), ("member", "member", "<22"), ("params", "params", ">9"),
           ("steps", "steps", ">6"), ("val_loss", "val loss", ">9.3f"), ("greedy_exact", "greedy exact", ">13.3f"),
           ("greedy_char", "greedy char", ">12.3f"), ("beam_exact", "beam exact", ">11"),
           ("beam_char", "beam char", ">10")]


@dataclass
class _OwnFlags:
    """The flags of this repro alone; ``Settings`` adds the shared run flags after them."""
    models: list[str] = setting(list(MODELS), flag=True, choices=list(MODELS))
    time: float = setting(180.0, flag=True, metavar="DUR", parse=seconds,
                          help="time of training per model (the equal budget)")
    steps: int | None = setting(None, flag=True, lo=0, help="budget in steps instead of --time")
    time_cap: float | None = setting(None, flag=True, metavar="SECONDS",
                                     help="with --steps: also stop at this many seconds (equal steps where they fit; "
                                          "the table's steps column says how many ran)")
    d_model: int = setting(256, flag=True, lo=0)
    rnn_layers: int = setting(1, flag=True, lo=0)
    layers: int = setting(3, flag=True, lo=0, help="Transformer layers per side; UT recurrent steps")
    heads: int = setting(4, flag=True, lo=0)
    dropout: float = setting(0.0, flag=True)
    batch_size: int = setting(64, flag=True, lo=0)
    lr: float = setting(2e-3, flag=True)
    warmup: int = setting(100, flag=True, lo=0)
    eval_pairs: int = setting(1000, flag=True, lo=0, help="test pairs decoded (0: the whole split)")
    beam: int = setting(4, flag=True, lo=0, help="beam width of the second decode (0: greedy only)")
    val_tokens: int = setting(20000, flag=True, lo=0, help="validation tokens of the final loss")
    gcide: str | None = setting(None, flag=True,
                                help="a GCIDE text file (default gcide.txt.gz in the data directory)")


@dataclass
class Settings(LoopRunFlags, _OwnFlags):
    """`tfamily repro reverse-dictionary`."""
    out: str | None = setting(None, flag=True, help="directory (default runs/repro/reverse-dictionary/<time>)")


def add_args(p) -> None:
    add_flags(p, Settings)


def overrides(name: str, args, out: Path) -> dict:
    """The ``tfamily train`` settings of one model: everything but the member is shared."""
    member, extra = MODELS[name]
    model = {"model.d_model": args.d_model, "model.dropout": args.dropout}
    if member in ("vanilla", "universal_transformer"):
        model.update({"model.heads.n_heads": args.heads, "model.depth.n_layers": args.layers,
                      "model.ff.d_ff": 4 * args.d_model})
    else:
        model["model.depth.n_layers"] = args.rnn_layers
    params = {} if args.gcide is None else {"path": args.gcide}
    return {"member": member, "name": name, "data.corpus": None, "data.task": "reverse_dictionary",
            "data.task_params": params, **model, **extra, **budget(args),
            "train.batch_size": args.batch_size, "train.lr": args.lr, "train.warmup": args.warmup,
            "train.eval_every": None, "train.eval_tokens": args.val_tokens, "train.ckpt_every": None,
            "train.precision": args.precision, "train.device": args.device, "train.threads": args.threads,
            "train.seed": args.seed, "train.progress": False, "train.tensorboard": False,
            "train.out": str(out / name)}


def score(preds: list[str], targets: list[str]) -> tuple[float, float]:
    """(exact match, character accuracy): the share of predictions equal to their target, and
    of target characters predicted at their position (a longer prediction's extra characters
    are not counted; a shorter one misses the rest)."""
    if len(preds) != len(targets) or not targets:
        raise ValueError(f"need one prediction per target, got {len(preds)} for {len(targets)}")
    right = sum(sum(p == t for p, t in zip(pr, tg)) for pr, tg in zip(preds, targets))
    total = sum(len(t) for t in targets)
    return sum(p == t for p, t in zip(preds, targets)) / len(targets), right / total


def evenly(pairs: list, n: int) -> list:
    """``n`` pairs spread evenly over ``pairs`` (all for n = 0 or n >= len): the splits keep the
    dictionary's alphabetical order, so the first n would all start with 'a'."""
    if not n or n >= len(pairs):
        return list(pairs)
    return [pairs[i * len(pairs) // n] for i in range(n)]


def decode_pairs(model, task, pairs: list, *, beam: int, batch_size: int, device) -> list[str]:
    """The headword decoded for each (definition, headword) pair, in order (greedy for beam 1)."""
    from ..models.generate import beam_search, greedy_decode
    max_len = task.max_word_len + 1  # the longest headword of any split, and EOS
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # similar lengths decode together
    out = [""] * len(pairs)
    with torch.no_grad():
        for k in range(0, len(order), batch_size):
            rows = order[k:k + batch_size]
            b = task.batch([pairs[i] for i in rows])
            src, pad = b["src"].to(device), b["src_padding"].to(device)
            kw = dict(bos=task.bos, eos=task.eos, max_len=max_len, src_padding=pad)
            ids = greedy_decode(model, src, **kw) if beam == 1 else beam_search(model, src, beam=beam, **kw)
            for i, row in zip(rows, ids[:, 1:].tolist()):
                out[i] = task.decode(row)
    return out


def train_one(name: str, args, out: Path) -> dict:
    from ..train import loop
    from ..train.config import load
    trainer = loop.Trainer(load(None, overrides(name, args, out)), data_dir=args.data_dir)
    try:
        res = trainer.fit()
        task, model = trainer.task, trainer.model
        test = evenly(task.pairs("test"), args.eval_pairs)
        targets = [w for _, w in test]
        t0 = time.perf_counter()
        greedy = decode_pairs(model, task, test, beam=1, batch_size=128, device=trainer.device)
        row = {"model": name, "member": MODELS[name][0], "params": res["params"], "steps": res["steps"],
               "train_s": res["train_s"], "val_loss": res["val_loss"], "test_pairs": len(test)}
        row["greedy_exact"], row["greedy_char"] = score(greedy, targets)
        row["beam_exact"] = row["beam_char"] = None
        if args.beam > 1:
            beamed = decode_pairs(model, task, test, beam=args.beam, batch_size=128, device=trainer.device)
            row["beam_exact"], row["beam_char"] = score(beamed, targets)
        row["decode_s"] = round(time.perf_counter() - t0, 1)
        row["examples"] = [{"definition": d, "target": w, "greedy": g} for (d, w), g in zip(test[:5], greedy[:5])]
    finally:
        trainer.close()
    return row


def to_markdown(rows: list[dict], beam: int) -> str:
    head = ["model", "member", "params", "steps", "val loss", "greedy exact", "greedy char"]
    if beam > 1:
        head += [f"beam {beam} exact", f"beam {beam} char"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], f"`{r['member']}`", f"{r['params']:,}", str(r["steps"]), f"{r['val_loss']:.3f}",
                 f"{r['greedy_exact']:.3f}", f"{r['greedy_char']:.3f}"]
        if beam > 1:
            cells += [f"{r['beam_exact']:.3f}", f"{r['beam_char']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _check(args) -> None:
    check_int("--steps", args.steps, 1, none=True, hint="leave it out to train each model for --time")
    if args.steps is None and not args.time > 0:
        raise ValueError(f"--time must be > 0 seconds (got {args.time}), or give --steps N")
    if args.time_cap is not None and (args.steps is None or not args.time_cap > 0):
        raise ValueError(f"--time-cap caps a --steps budget and must be > 0 seconds (got {args.time_cap}"
                         f"{'' if args.steps else ' without --steps'}); for a time budget use --time")
    for name in ("d_model", "rnn_layers", "layers", "heads", "batch_size", "val_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.eval_pairs < 0 or args.beam < 0:
        raise ValueError(f"--eval-pairs and --beam must be >= 0, got {args.eval_pairs} and {args.beam}")
    if args.d_model % args.heads:
        raise ValueError(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")


def run(args) -> int:
    _check(args)
    out = Path(args.out or f"runs/repro/reverse-dictionary/{time.strftime('%Y%m%d-%H%M%S')}")
    shared = runner.args_plan(args, drop=("models",))

    def work(d: Path) -> dict:
        print(f"# {d.name}: {MODELS[d.name][0]}", file=sys.stderr, flush=True)
        r = train_one(d.name, args, out)
        print(f"# {d.name}: {r['steps']} steps, val loss {r['val_loss']:.3f}, greedy exact {r['greedy_exact']:.3f} "
              f"char {r['greedy_char']:.3f}", file=sys.stderr, flush=True)
        return r
    cells = [(out / name, {**shared, "model": name}) for name in dict.fromkeys(args.models)]
    rows = [r for r in runner.run_cells(cells, work, shard=args.shard, log=lambda m: print(m, file=sys.stderr))
            if r is not None]
    if not rows:
        return 0
    fields = [k for k in rows[0] if k != "examples"]
    write_rows(out, "results", rows, fields)
    (out / "results.md").write_text(to_markdown(rows, args.beam))
    shown = [{**r, **{k: "-" if r[k] is None else f"{r[k]:.3f}" for k in ("beam_exact", "beam_char")}} for r in rows]
    print_rows(rows if args.json else shown, COLUMNS, args.json)
    return 0


if __name__ == "__main__":  # the same as `tfamily repro reverse-dictionary`
    from ..cli import main
    sys.exit(main(["repro", "reverse-dictionary", *sys.argv[1:]]))
