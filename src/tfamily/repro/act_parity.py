"""ACT on parity (Graves 2016, section 3.1): sequence error for several tau against no ACT.

Each sequence is one input step (T = 1): a 64-dimensional vector with 1 to 64 randomly
chosen entries set to +1 or -1 and the rest 0; the target is 1 if the number of +1 entries
is odd. A 128-unit tanh RNN cell (``nn.RNNCell``) with one sigmoid output (binary
cross-entropy on the logit), batch 128, eps 0.01, M 100; the loss is the mean BCE plus tau
times the mean ponder cost rho = N + R (eq. 14). "No ACT" is the same network with M = 1,
which is exactly the plain RNN (tests/nn/test_act.py). The paper: without ACT the error stays
near 40% (chance is 50%); for tau <= 0.03 it falls below 5%, and at intermediate tau the
ponder time grows with the number of non-zero entries.

The model is an RNN cell under ACT (``ParityNet``, whose ``loss`` is eq. 14), trained by the
shared loop on a ``StreamTask`` (``repro/stream.py``) of parity batches. What differs from
the paper: the budget (the paper trained far longer; here each setting gets ``--steps`` or
``--time`` seconds on a CPU), the optimiser (Adam at
``--lr`` with gradient-norm clipping at 1; the paper's optimiser settings are not ours) and
the tau grid (``--taus``). Sequence error is measured on ``--eval-sequences`` fresh
sequences, the same ones for every setting. Writes ``table.json/.csv`` (one row per
setting), ``ponder.json/.csv`` (mean ponder steps N per number of non-zero entries),
``curves.json/.csv`` (error during training; ``seconds`` counts training, not evaluation),
``act_parity.png`` and each setting's run directory under ``runs/`` (log, final checkpoint). The
settings are cells of the one grid runner (``train/grid.py``): a rerun over the same ``--out``
skips a finished one, ``--shard i/n`` trains every n-th.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..bench.results import print_rows, write_rows
from ..nn.depth import ACT
from ..train import grid as runner
from ..base.options import seconds
from .stream import StreamTask, loop_config
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily repro act-parity`."""
    taus: list[float] = setting([0.1, 0.01, 0.001, 0.0001], flag=True, check=False,  # run() names the fix
                                help="time penalties to train with ACT (a model without ACT is trained first, "
                                     "unless --no-baseline)")
    no_baseline: bool = setting(False, flag=True,
                                help="skip the model without ACT (e.g. a longer run of one tau after a sweep)")
    steps: int = setting(20000, flag=True, lo=0, help="training steps per setting (at most)")
    time: float = setting(0.0, flag=True, metavar="DUR", parse=seconds,
                          help="time of training per setting (0: no limit)")
    dim: int = setting(64, flag=True, lo=0, help="input size (the paper: 64)")
    hidden: int = setting(128, flag=True, lo=0, help="tanh units (the paper: 128)")
    batch: int = setting(128, flag=True, lo=0)
    lr: float = setting(1e-3, flag=True)
    max_ponder: int = setting(100, flag=True, lo=0, help="M, the cap on ponder steps")
    eps: float = setting(0.01, flag=True)
    eval_sequences: int = setting(4096, flag=True, lo=0)
    eval_every: int = setting(500, flag=True, lo=0, help="steps between error measurements")
    seed: int = setting(0, flag=True, lo=0)
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/repro/act_parity", flag=True, help="directory for the tables and the plot")
    shard: str | None = setting(None, flag=True, metavar="I/N", help=runner.SHARD_HELP)
    json: bool = setting(False, flag=True, help="print the table as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def parity_batch(n: int, dim: int, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` vectors (n, dim) with k ~ U{1..dim} random entries set to +-1, their parity
    targets (n,) (1.0 when the number of +1 entries is odd) and k (n,)."""
    k = torch.randint(1, dim + 1, (n,), generator=gen)
    rank = torch.rand(n, dim, generator=gen).argsort(dim=1).argsort(dim=1)  # a random order per row
    sign = torch.randint(0, 2, (n, dim), generator=gen) * 2 - 1
    x = torch.where(rank < k[:, None], sign, torch.zeros_like(sign))
    return x.float(), ((x == 1).sum(dim=1) % 2).float(), k


def model(args, act: bool) -> ACT:
    cell = nn.RNNCell(args.dim + 1, args.hidden, nonlinearity="tanh")
    return ACT(cell, nn.Linear(args.hidden, 1), max_steps=args.max_ponder if act else 1, eps=args.eps)


def evaluate(net: ACT, data: tuple[Tensor, Tensor, Tensor], dim: int) -> tuple[float, float, list[float]]:
    """Sequence error, mean ponder steps and mean N for k = 1..dim non-zero entries."""
    x, y, k = data
    with torch.no_grad():
        out = net(x[:, None])
    wrong = ((out.y[:, 0, 0] > 0).float() != y).float()
    n = out.n[:, 0]
    per_k = torch.zeros(dim).index_add_(0, k - 1, n) / torch.bincount(k - 1, minlength=dim).clamp(min=1)
    return float(wrong.mean()), float(n.mean()), per_k.tolist()


class ParityNet(nn.Module):
    """The ACT network with its loss: mean BCE on the logit plus tau times the mean ponder
    cost (eq. 14; tau None: no ACT, M = 1, and no penalty). In evaluation it keeps the
    sequence error and mean ponder steps of its last call (``seen``) for the curves."""

    def __init__(self, args, tau: float | None):
        super().__init__()
        self.act, self.tau, self.seen = model(args, act=tau is not None), tau or 0.0, {}

    def loss(self, batch: dict) -> tuple[Tensor, dict]:
        out = self.act(batch["x"][:, None])
        logit = out.y[:, 0, 0]
        loss = F.binary_cross_entropy_with_logits(logit, batch["y"]) + self.tau * out.ponder.mean()  # eq. 14
        wrong = ((logit > 0).float() != batch["y"]).float().mean().detach()
        if not self.training:
            self.seen = {"error": wrong, "ponder": out.n[:, 0].mean()}
        return loss, {"tokens": logit.shape[0], "acc": 1.0 - wrong}


def parity_task(args, name: str, data, net: ParityNet) -> StreamTask:
    """Batches of ``args.batch`` fresh sequences from one generator (seed + 1); the held-out
    batch is ``data``, scored for the curves as sequence error and mean ponder steps."""
    def draw(gen: torch.Generator) -> dict:
        x, y, _ = parity_batch(args.batch, args.dim, gen)
        return {"x": x, "y": y}
    return StreamTask(name, draw, seed=args.seed + 1, unit="sequences", size=lambda b: b["y"].shape[0],
                      held_out=lambda: [{"x": data[0], "y": data[1]}], eval_units=data[1].shape[0],
                      metrics=lambda loss: {k: float(v) for k, v in net.seen.items()})


def train_setting(args, tau: float | None, data, log) -> tuple[dict, list[dict], list[dict]]:
    """Train one setting (``tau`` None: no ACT); return its table row, ponder rows and curve."""
    from ..train.loop import Trainer
    from ..train.rng import seed_all

    name = "no_act" if tau is None else f"tau={tau:g}"
    run = "no_act" if tau is None else f"tau{tau:g}"
    seed_all(args.seed)
    net = ParityNet(args, tau)
    cfg = loop_config(f"act-parity-{run}", Path(args.out) / "runs" / run, steps=args.steps,
                      seconds=args.time if args.time > 0 else None, lr=args.lr, seed=args.seed,
                      batch_size=args.batch, eval_every=args.eval_every)
    trainer = Trainer(cfg, task=parity_task(args, name, data, net), model=net)
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    curve = [{"setting": name, "step": e["step"], "seconds": round(e["train_s"], 1), "error": round(e["error"], 4),
              "ponder": round(e["ponder"], 3)} for e in trainer.evals if e["step"] % args.eval_every == 0]
    for c in curve:
        log(f"# {name} step {c['step']}: error {100 * c['error']:.1f}% ponder {c['ponder']:.2f} ({c['seconds']:.0f} s)")
    step, seconds = result["steps"], result["train_s"]
    err, ponder, per_k = evaluate(net.act, data, args.dim)
    row = {"setting": name, "tau": tau, "steps": step, "sequences": step * args.batch,
           "train_seconds": round(seconds, 1), "sequence_error": round(err, 4), "mean_ponder": round(ponder, 3)}
    log(f"# {name}: {step} steps, sequence error {100 * err:.1f}%, mean ponder {ponder:.2f}")
    return row, [{"setting": name, "nonzero": i + 1, "ponder": round(v, 3)} for i, v in enumerate(per_k)], curve


def _plot(path: Path, ponder: list[dict], curves: list[dict]) -> None:
    plt = pyplot()

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["setting"] for r in ponder):
        rows = [r for r in ponder if r["setting"] == name]
        a.plot([r["nonzero"] for r in rows], [r["ponder"] for r in rows], label=name)
        c = [r for r in curves if r["setting"] == name]
        b.plot([r["step"] for r in c], [100 * r["error"] for r in c], label=name)
    a.set(xlabel="non-zero entries", ylabel="ponder steps N", title="Ponder time vs difficulty")
    b.set(xlabel="training step", ylabel="sequence error (%)", title="Parity: sequence error")
    a.legend()
    b.legend()
    save_figure(fig, path, dpi=100)


def run(args) -> int:
    for name in ("steps", "dim", "hidden", "batch", "max_ponder", "eval_sequences", "eval_every"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if any(not t >= 0 or t == float("inf") for t in args.taus):  # NaN fails t >= 0
        raise ValueError(f"--taus must be finite and >= 0, got {args.taus}; e.g. --taus 0.01 0.001")
    if args.threads:
        torch.set_num_threads(args.threads)
    log = (lambda m: print(m, file=sys.stderr, flush=True))
    data = parity_batch(args.eval_sequences, args.dim, torch.Generator().manual_seed(args.seed + 2))
    out = Path(args.out)
    shared = runner.args_plan(args, drop=("taus", "no_baseline"))
    settings = {out / "runs" / ("no_act" if tau is None else f"tau{tau:g}"): tau
                for tau in ([] if args.no_baseline else [None]) + list(args.taus)}

    def work(d: Path) -> dict:
        row, p, c = train_setting(args, settings[d], data, log)
        return {"row": row, "ponder": p, "curve": c}
    cells = [(d, {**shared, "tau": tau}) for d, tau in settings.items()]
    done = [r for r in runner.run_cells(cells, work, shard=args.shard, log=log) if r is not None]
    if not done:
        return 0
    rows = [r["row"] for r in done]
    ponder, curves = [p for r in done for p in r["ponder"]], [c for r in done for c in r["curve"]]
    write_rows(out, "table", rows, ["setting", "tau", "steps", "sequences", "train_seconds", "sequence_error",
                                    "mean_ponder"])
    write_rows(out, "ponder", ponder, ["setting", "nonzero", "ponder"])
    write_rows(out, "curves", curves, ["setting", "step", "seconds", "error", "ponder"])
    _plot(out / "act_parity.png", ponder, curves)
    print_rows(rows, [("setting", "setting", "<12"), ("steps", "steps", ">8"), ("sequence_error", "error", ">10.1%"),
                      ("mean_ponder", "ponder", ">9.2f")], args.json)
    return 0


if __name__ == "__main__":  # the same as `tfamily repro act-parity`
    from ..cli import main
    sys.exit(main(["repro", "act-parity", *sys.argv[1:]]))
