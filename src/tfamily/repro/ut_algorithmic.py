"""Universal Transformer algorithmic tasks (Dehghani et al. 2019, section 3.3, table 2).

Copy, reverse and addition over symbols 0-9 as source/target pairs: copy and reverse emit
the source (reversed); addition reads two numbers written least significant digit first
around a separator (id 10) and emits their sum, least significant digit first (the
tensor2tensor algorithmic problems). Training lengths are uniform in 1..``--train-len`` (40);
test lengths uniform in 1..``--test-len`` (400). For addition the length is the whole source
(both numbers and the separator, at least 3). "Randomized offsets": in training every
example gets its own random start offset in 0..test_len - train_len added to the positions of
its source and its target (the sinusoidal input positions of the vanilla model, the
coordinate signal of the UT, whose position parts take a (b,) tensor of row offsets), so
positions past 40 are seen; at test the offset is 0. The LSTM has no positions. One offset
per batch, the first version, left the vanilla model far from learning copy (d 64, depth 4,
600 steps of 64: training loss 1.93 with one offset per batch, 0.14 with one per example,
0.005 without offsets; ``--offsets batch`` keeps the old draw).

Models, at one width (``--d-model``, 128, 4 heads, feed-forward 4x) and one residual layout
(``--residual``, pre_norm by default: tensor2tensor's ``layer_preprocess_sequence="n"``, which
trained the paper's models; with the post-norm of the paper's equations the 8-step UT did not
learn copy at lengths 1..10 in 400 steps (loss 2.03, char accuracy .12, where pre-norm reached
1.00 and the 4-step post-norm UT .997): an LSTM encoder-decoder
without attention (``lstm_seq2seq``), the ``vanilla`` Transformer with ``--depth`` layers on each
side, and the ``universal_transformer`` with ``--depth`` recurrent steps, without ACT
(``universal``) and with it (``universal_act``, at most ``--depth`` steps). Each trains for the
same ``--steps`` and/or ``--time`` seconds per task (Adam, linear warm-up, gradient-norm
clipping at 1: ``repro/stream.loop_config``) on the shared loop, from a ``StreamTask`` whose
batches carry the offsets as a batch field (``offset``: a (b,) tensor, or with ``--offsets
batch`` one int; the LSTM's batches have none, though the same offsets are drawn, so every
model sees the same pairs); each run's directory is under ``runs/``. Char accuracy = share of
target symbols the greedy decode gets right at their position; sequence accuracy = share of decodes equal to the whole target (EOS included).
What differs from the paper: the budget (t2t trained for hundreds of thousands of steps on a
GPU; here seconds on a CPU), the depth and width of the baselines (not stated there) and the
test set size (``--eval-sequences``, the paper 10k). The (task, model) runs are cells of the one
grid runner (``train/grid.py``): a rerun over the same ``--out`` skips a finished one,
``--shard i/n`` trains every n-th.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import members
from ..bench.results import print_rows, write_rows
from ..build import build
from ..models.generate import greedy_decode
from ..base.options import seconds
from ..spec import Spec
from ..train import grid as runner
from ..train.device import resolve_device
from ..train.evaluate import to_device
from ..train.tasks.seq2seq import pairs_batch
from .stream import StreamTask, loop_config
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

TASKS = ("copy", "reverse", "addition")
MODELS = ("lstm", "transformer", "ut", "ut_act")
SEP, BOS, EOS, VOCAB = 10, 11, 12, 13
# Dehghani et al. 2019, table 2 (char-acc, seq-acc) at test length 400.
PAPER = {("ut", "copy"): (0.91, 0.35), ("ut", "reverse"): (0.96, 0.46), ("ut", "addition"): (0.34, 0.02),
         ("transformer", "copy"): (0.53, 0.03), ("transformer", "reverse"): (0.13, 0.06),
         ("transformer", "addition"): (0.07, 0.0), ("lstm", "copy"): (0.45, 0.09),
         ("lstm", "reverse"): (0.66, 0.11), ("lstm", "addition"): (0.08, 0.0)}


@dataclass
class Settings:
    """`tfamily repro ut-algorithmic`."""
    tasks: list[str] = setting(list(TASKS), flag=True, help=f"subset of {', '.join(TASKS)}")
    models: list[str] = setting(list(MODELS), flag=True, help=f"subset of {', '.join(MODELS)}")
    steps: int = setting(5000, flag=True, lo=0, help="training steps per task and model (at most)")
    time: float = setting(0.0, flag=True, metavar="DUR", parse=seconds,
                          help="time of training per task and model (0: no limit)")
    d_model: int = setting(128, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    depth: int = setting(8, flag=True, lo=0, help="UT steps (max steps with ACT) and vanilla layers")
    lstm_layers: int = setting(2, flag=True, lo=0)
    residual: str = setting("pre_norm", flag=True, choices=("pre_norm", "post_norm"),
                            help="the Transformers' and UT's residual layout: pre_norm as tensor2tensor's hparams "
                                 "(which made the paper's table), post_norm as the paper's equations 4-5")
    train_len: int = setting(40, flag=True, lo=0)
    test_len: int = setting(400, flag=True, lo=0)
    no_offsets: bool = setting(False, flag=True, help="train without randomized position offsets")
    offsets: str = setting("example", flag=True, choices=("example", "batch"),
                           help="draw a randomized offset per example (default) or one per batch (the first version)")
    batch: int = setting(64, flag=True, lo=0)
    lr: float = setting(1e-3, flag=True)
    warmup: int = setting(100, flag=True, lo=0)
    eval_sequences: int = setting(256, flag=True, lo=0)
    eval_batch: int = setting(64, flag=True, lo=0)
    seed: int = setting(0, flag=True, lo=0)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    device: str = setting("cpu", flag=True, help="cpu, cuda, cuda:N or auto (fp32 on each)")
    out: str = setting("runs/repro/ut_algorithmic", flag=True, help="directory for the tables and the plot")
    shard: str | None = setting(None, flag=True, metavar="I/N", help=runner.SHARD_HELP)
    json: bool = setting(False, flag=True, help="print the table as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def _digits(n: int, gen: torch.Generator) -> list[int]:
    return torch.randint(0, 10, (n,), generator=gen).tolist()


def add_lsb(a: list[int], b: list[int]) -> list[int]:
    """Digits (least significant first) of a + b, themselves least significant first."""
    out, carry = [], 0
    for i in range(max(len(a), len(b))):
        s = (a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) + carry
        out.append(s % 10)
        carry = s // 10
    return out + [carry] if carry else out


def make_pair(task: str, length: int, gen: torch.Generator) -> tuple[list[int], list[int]]:
    """One (source, target) of ``task`` whose source has ``length`` symbols."""
    if task in ("copy", "reverse"):
        w = _digits(length, gen)
        return w, (w if task == "copy" else w[::-1])
    if task == "addition":
        length = max(length, 3)
        n1 = int(torch.randint(1, length - 1, (1,), generator=gen))
        a, b = _digits(n1, gen), _digits(length - 1 - n1, gen)
        return a + [SEP] + b, add_lsb(a, b)
    raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")


def sample(task: str, n: int, max_len: int, gen: torch.Generator) -> list[tuple[list[int], list[int]]]:
    """``n`` pairs with source lengths uniform in 1..max_len."""
    return [make_pair(task, int(k), gen) for k in torch.randint(1, max_len + 1, (n,), generator=gen)]


def collate(pairs: list[tuple[list[int], list[int]]]) -> dict:
    """Pairs -> the seq2seq batch of ``train.tasks.seq2seq`` (BOS + target in, target + EOS out)."""
    return pairs_batch(pairs, BOS, EOS)


def strip(decoded: Tensor) -> list[list[int]]:
    """Greedy decodes (b, n) starting with BOS -> the symbols before the first EOS."""
    out = []
    for row in decoded[:, 1:].tolist():
        out.append(row[:row.index(EOS)] if EOS in row else row)
    return out


def accuracy(preds: list[list[int]], targets: list[list[int]]) -> tuple[float, float]:
    """(char-acc, seq-acc): the share of target symbols predicted at their position, and of
    predictions equal to their whole target (a too long or too short output is not exact)."""
    if len(preds) != len(targets) or not targets:
        raise ValueError(f"need one prediction per target, got {len(preds)} for {len(targets)}")
    right = sum(sum(p == y for p, y in zip(pr, tg)) for pr, tg in zip(preds, targets))
    total = sum(len(tg) for tg in targets)
    return right / total, sum(pr == tg for pr, tg in zip(preds, targets)) / len(targets)


def model_spec(name: str, args) -> Spec:
    if name == "lstm":  # Sutskever et al. 2014: no attention, the decoder starts from the encoder's state
        return members.lstm_seq2seq(vocab_size=VOCAB, d_model=args.d_model, dropout=0.0,
                                    depth__n_layers=args.lstm_layers)
    common = dict(vocab_size=VOCAB, d_model=args.d_model, dropout=0.0, heads__n_heads=args.heads,
                  depth__n_layers=args.depth, ff__d_ff=4 * args.d_model, residual__name=args.residual)
    if name == "transformer":
        return members.vanilla(**common)
    return members.universal_transformer(**common, depth__name="universal_act" if name == "ut_act" else "universal")


def make_model(name: str, args) -> nn.Module:
    return build(model_spec(name, args))


def algorithmic_task(task: str, name: str, args) -> StreamTask:
    """Training pairs of ``task`` at lengths 1..train_len from one generator (seed + 1), each
    batch's randomized offsets drawn first (``offset``, for every model but the LSTM, which has
    no positions); the loop's final evaluation is the teacher-forced loss on ``--eval-batch``
    held-out pairs at training lengths (seed + 4), without offsets."""
    spread = 0 if args.no_offsets else args.test_len - args.train_len

    def draw(gen: torch.Generator) -> dict:
        shift = torch.randint(0, spread + 1, (args.batch if args.offsets == "example" else 1,), generator=gen)
        batch = collate(sample(task, args.batch, args.train_len, gen))
        if name != "lstm":
            batch["offset"] = shift if args.offsets == "example" else int(shift)
        return batch

    held = collate(sample(task, args.eval_batch, args.train_len, torch.Generator().manual_seed(args.seed + 4)))
    return StreamTask(f"ut-{task}", draw, seed=args.seed + 1, unit="tokens",
                      size=lambda b: b["src"].numel() + b["tgt_in"].numel(), held_out=lambda: [held],
                      eval_units=held["src"].numel() + held["tgt_in"].numel(), vocab_size=VOCAB,
                      seq_len=args.train_len + 2)


def decode(net: nn.Module, batch: dict, max_len: int) -> Tensor:
    return greedy_decode(net, batch["src"], bos=BOS, eos=EOS, max_len=max_len, src_padding=batch["src_padding"])


def evaluate(net: nn.Module, pairs: list, batch_size: int) -> tuple[float, float]:
    device = next(net.parameters()).device
    pairs = sorted(pairs, key=lambda p: len(p[0]))  # similar lengths decode together
    preds = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        preds += strip(decode(net, to_device(collate(chunk), device), max(len(y) for _, y in chunk) + 1).cpu())
    return accuracy(preds, [y for _, y in pairs])


def train_one(task: str, name: str, args, test: list, log) -> dict:
    from ..train.loop import Trainer

    cfg = loop_config(f"ut-{task}-{name}", Path(args.out) / "runs" / f"{task}-{name}", steps=args.steps,
                      seconds=args.time if args.time > 0 else None, lr=args.lr, seed=args.seed,
                      batch_size=args.batch, warmup=args.warmup, betas=(0.9, 0.98), device=args.device)
    trainer = Trainer(cfg, task=algorithmic_task(task, name, args), spec=model_spec(name, args))
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    net, step, seconds = trainer.model, result["steps"], result["train_s"]
    loss = trainer.recent[-1] if trainer.recent else float("nan")  # the last step's
    char, seq = evaluate(net, test, args.eval_batch)
    paper = PAPER.get((name, task), (None, None))
    log(f"# {task} {name}: {step} steps in {seconds:.0f} s, loss {loss:.3f}, char {char:.3f} seq {seq:.3f}")
    return {"task": task, "model": name, "device": str(trainer.device), "steps": step,
            "train_seconds": round(seconds, 1), "params": sum(p.numel() for p in net.parameters()),
            "final_loss": round(loss, 4), "char_acc": round(char, 4), "seq_acc": round(seq, 4),
            "paper_char_acc": paper[0], "paper_seq_acc": paper[1]}


def _plot(path: Path, rows: list[dict], title: str) -> None:
    plt = pyplot()

    tasks, models = list(dict.fromkeys(r["task"] for r in rows)), list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(models)
    for ax, key, label in ((axes[0], "char_acc", "char accuracy"), (axes[1], "seq_acc", "sequence accuracy")):
        for j, m in enumerate(models):
            vals = [next((r[key] for r in rows if r["task"] == t and r["model"] == m), 0.0) for t in tasks]
            xs = [i + j * width for i in range(len(tasks))]
            ax.bar(xs, vals, width, label=m)
            paper = [(x, PAPER[(m, t)][key == "seq_acc"]) for x, t in zip(xs, tasks) if (m, t) in PAPER]
            if paper:  # the paper's table 2 value as a black tick on the bar
                ax.scatter(*zip(*paper), marker="_", s=300, color="black", label="paper" if j == 0 else None)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks)
        ax.set(ylabel=label, ylim=(0, 1), title=label)
    axes[0].legend()
    fig.suptitle(title)
    save_figure(fig, path, dpi=100)


def _check(args) -> None:
    resolve_device(args.device)  # names the valid devices when this one is not
    for name in ("steps", "d_model", "heads", "depth", "lstm_layers", "train_len", "test_len", "batch",
                 "warmup", "eval_sequences", "eval_batch"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.d_model % args.heads:
        raise ValueError(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")
    if args.test_len < args.train_len:
        raise ValueError(f"--test-len {args.test_len} must be >= --train-len {args.train_len}")
    for flag, given, valid in (("--tasks", args.tasks, TASKS), ("--models", args.models, MODELS)):
        bad = [v for v in given if v not in valid]
        if bad:
            raise ValueError(f"{flag}: unknown {bad}; choose from {', '.join(valid)}")
    if args.time < 0 or args.lr <= 0:
        raise ValueError(f"--time must be >= 0 and --lr > 0, got --time {args.time} --lr {args.lr}")


def run(args) -> int:
    _check(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    log = (lambda m: print(m, file=sys.stderr, flush=True))
    out = Path(args.out)
    shared = runner.args_plan(args, drop=("tasks", "models"))
    cells = {out / "runs" / f"{task}-{name}": (task, name) for task in dict.fromkeys(args.tasks)
             for name in dict.fromkeys(args.models)}

    def work(d: Path) -> dict:
        task, name = cells[d]
        test = sample(task, args.eval_sequences, args.test_len, torch.Generator().manual_seed(args.seed + 2))
        return train_one(task, name, args, test, log)
    plans = [(d, {**shared, "task": task, "model": name}) for d, (task, name) in cells.items()]
    rows = [r for r in runner.run_cells(plans, work, shard=args.shard, log=log) if r is not None]
    if not rows:
        return 0
    write_rows(out, "results", rows, list(rows[0]))
    _plot(out / "ut_algorithmic.png", rows, f"train lengths 1..{args.train_len}, test 1..{args.test_len}; "
          f"d {args.d_model}, depth {args.depth}, {args.steps} steps / {args.time:g} s each")
    shown = rows if args.json else [{**r, **{k: "-" if r[k] is None else f"{r[k]:.2f}"
                                             for k in ("paper_char_acc", "paper_seq_acc")}} for r in rows]
    print_rows(shown, [("task", "task", "<9"), ("model", "model", "<12"), ("steps", "steps", ">7"),
                       ("char_acc", "char", ">7.2f"), ("seq_acc", "seq", ">7.2f"),
                       ("paper_char_acc", "paper char", ">11"), ("paper_seq_acc", "paper seq", ">10")], args.json)
    return 0


if __name__ == "__main__":  # the same as `tfamily repro ut-algorithmic`
    from ..cli import main
    sys.exit(main(["repro", "ut-algorithmic", *sys.argv[1:]]))
