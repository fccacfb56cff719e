"""The Reformer's duplication experiment (Kitaev et al. 2020, section 5, table 2).

Sequences ``0 w 0 w`` (``DuplicateTask``), loss and accuracy on the second ``w`` only: a
model can only get them right by attending back to the first copy. A one-layer
shared-QK model is trained with full attention and with LSH attention of 1, 2 and 4 hash
rounds, and each is evaluated with full attention and with 1, 2, 4 and 8 rounds (the
kernel is swapped in place; the weights are the same). "Full" attention is the LSH
kernel with one chunk holding the whole sequence and ``same_bucket_only=False``, which is
exactly dense shared-QK attention with the self rule (tests/nn/kernels/test_lsh.py), so the
only difference between settings is the hashing.

The paper uses |w| = 511 (1024-token sequences) and long training; the defaults here (|w| = 63,
d_model 64, 4 heads, buckets of 16 so about 8 buckets as the paper's 1024 tokens / 64,
AdamW at 1e-2, 1000 steps of 32 sequences) train each model in a few minutes on one
CPU core; ``--jobs`` runs the training settings in parallel processes. Full attention
reaches 100% after about 400 steps. Each model trains on the shared loop (``train.Trainer``)
with a ``StreamTask`` of duplication batches and the recipe of ``repro/stream.loop_config``
(AdamW without weight decay, a linear warm-up over the first 5% of the steps, then a constant
rate, gradient norm clipped at 1); each setting's run directory is under ``runs/``. The training
settings are cells of the one grid runner (``train/grid.py``): a rerun over the same ``--out``
skips a finished one, ``--shard i/n`` trains every n-th.
"""
from __future__ import annotations

import csv
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..train import grid as runner
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily repro reformer-duplication`."""
    length: int = setting(63, flag=True, lo=0, help="|w|; sequences have 2|w| + 2 tokens")
    n_symbols: int = setting(127, flag=True, lo=0)
    train: list[str] = setting(["full", "lsh1", "lsh2", "lsh4"], flag=True,
                               help="training settings: full or lshR (R hash rounds)")
    eval: list[str] = setting(["full", "lsh1", "lsh2", "lsh4", "lsh8"], flag=True)
    bucket_size: int = setting(16, flag=True, lo=0, help="average bucket size = chunk length")
    steps: int = setting(1000, flag=True, lo=0, help="training steps per model")
    batch: int = setting(32, flag=True, lo=0)
    lr: float = setting(1e-2, flag=True)
    d_model: int = setting(64, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    layers: int = setting(1, flag=True, lo=0)
    eval_sequences: int = setting(512, flag=True, lo=0)
    seed: int = setting(0, flag=True, lo=0)
    jobs: int = setting(2, flag=True, lo=0,
                        help="training settings run in parallel processes (1 torch thread each when > 1)")
    threads: int = setting(0, flag=True, lo=0, help="torch threads per job (0: torch's default, "
                                              "or 1 with several jobs)")
    out: str = setting("runs/repro/reformer_duplication", flag=True, help="directory for table.csv/.json")
    shard: str | None = setting(None, flag=True, metavar="I/N", help=runner.SHARD_HELP)
    json: bool = setting(False, flag=True, help="print the table as JSON")


def add_args(p) -> None:
    add_flags(p, Settings)


def _setting(name: str, length: int, bucket_size: int) -> dict:
    """Kernel params of a setting: 'full' = one chunk of the whole sequence whose window takes
    every key, whatever its bucket; 'lshR' = R rounds of the paper's own-bucket windows."""
    if name == "full":
        return {"n_hashes": 1, "bucket_size": bucket_size, "chunk_len": length, "same_bucket_only": False}
    if name.startswith("lsh") and name[3:].isdigit() and int(name[3:]) >= 1:
        return {"n_hashes": int(name[3:]), "bucket_size": bucket_size}
    raise ValueError(f"unknown setting {name!r}; use 'full' or 'lshR' with R >= 1 hash rounds (e.g. lsh4)")


def model_spec(args, task, setting: str):
    from ..spec import Spec

    return Spec(member="reformer_duplication", vocab_size=task.vocab_size, d_model=args.d_model,
                dropout=0.0, pattern={"name": "causal"},
                kernel={"name": "lsh", "params": _setting(setting, task.seq_len, args.bucket_size)},
                position={"name": "learned", "max_len": task.seq_len},
                heads={"n_heads": args.heads, "shared_qk": True}, residual={"name": "pre_norm"},
                depth={"name": "stack", "n_layers": args.layers}, ff={"d_ff": 2 * args.d_model},
                objective={"name": "causal_lm"})


def _batch(task, n: int, gen) -> dict:
    b = task.sample(n, gen)
    return {"x": b.input, "y": b.target, "loss_mask": b.loss_mask}


def duplication_task(args, task):
    """Batches of ``args.batch`` sequences from one generator (seed + 1); the loop's own final
    evaluation scores 64 held-out sequences (seed + 4) with the kernel the model trained with."""
    import torch

    from .stream import StreamTask

    def held_out():
        yield _batch(task, 64, torch.Generator().manual_seed(args.seed + 4))
    return StreamTask("duplication", lambda g: _batch(task, args.batch, g), seed=args.seed + 1, unit="tokens",
                      size=lambda b: b["x"].numel(), held_out=held_out, eval_units=64 * task.seq_len,
                      vocab_size=task.vocab_size, seq_len=task.seq_len)


def train(args, task, setting: str, log=None):
    from ..train.loop import Trainer
    from .stream import loop_config

    cfg = loop_config(f"reformer-duplication-{setting}", Path(args.out) / "runs" / setting, steps=args.steps,
                      seconds=None, lr=args.lr, seed=args.seed, batch_size=args.batch,
                      warmup=max(1, args.steps // 20))
    trainer = Trainer(cfg, task=duplication_task(args, task), spec=model_spec(args, task, setting))
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    if log:
        log(f"# train {setting}: {result['steps']} steps, loss {result['train_loss']:.3f}, held-out accuracy "
            f"{result['val_acc']:.3f} ({result['train_s']:.0f} s)")
    return trainer.model.eval(), result["train_s"]


def evaluate(args, task, model, setting: str) -> float:
    """Second-half token accuracy with the kernel of ``setting`` swapped into every layer."""
    import torch

    from ..nn.kernels.lsh import LSHKernel

    for module in model.modules():
        if hasattr(module, "kernel") and hasattr(module, "pattern"):
            module.kernel = LSHKernel(**_setting(setting, task.seq_len, args.bucket_size))
    gen = torch.Generator().manual_seed(args.seed + 2)  # the same sequences for every cell
    correct = total = 0
    torch.manual_seed(args.seed + 3)
    with torch.no_grad():
        for start in range(0, args.eval_sequences, 64):
            batch = _batch(task, min(64, args.eval_sequences - start), gen)
            pred = model(batch["x"]).argmax(-1)
            keep = batch["loss_mask"]
            correct += int((pred == batch["y"])[keep].sum())
            total += int(keep.sum())
    return correct / total


def _train_and_evaluate(args, setting: str) -> dict:
    import torch

    from ..data.synthetic import DuplicateTask

    threads = args.threads or (1 if args.jobs > 1 else 0)
    if threads:
        torch.set_num_threads(threads)
    task = DuplicateTask(n_symbols=args.n_symbols, length=args.length)
    log = (lambda m: print(m, file=sys.stderr, flush=True))
    model, seconds = train(args, task, setting, log)
    row = {"train": setting, "train_seconds": round(seconds, 1), "steps": args.steps}
    for ev in args.eval:
        row[ev] = round(100 * evaluate(args, task, model, ev), 1)
    log(f"# {setting}: " + ", ".join(f"{ev} {row[ev]}%" for ev in args.eval))
    return row


def _cell(args, d: Path) -> dict:
    return _train_and_evaluate(args, Path(d).name)


def run(args) -> int:
    for s in args.train + args.eval:
        _setting(s, 2, 1)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    out = Path(args.out)
    shared = runner.args_plan(args, drop=("train",))
    cells = [(out / "runs" / s, {**shared, "setting": s}) for s in dict.fromkeys(args.train)]
    work, log = functools.partial(_cell, args), (lambda m: print(m, file=sys.stderr, flush=True))
    if args.jobs == 1:
        rows = runner.run_cells(cells, work, shard=args.shard, log=log)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(args.jobs, len(args.train)), mp_context=mp.get_context("spawn")) as pool:
            rows = runner.run_cells(cells, work, shard=args.shard, log=log, mapper=pool.map)
    rows = [r for r in rows if r is not None]
    if not rows:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    fields = ["train", *args.eval, "train_seconds", "steps"]
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    meta = {k: getattr(args, k) for k in ("length", "n_symbols", "bucket_size", "steps", "batch", "lr",
                                          "d_model", "heads", "layers", "eval_sequences", "seed", "jobs")}
    (out / "table.json").write_text(json.dumps({"config": meta, "rows": rows}, indent=2))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, args.eval, args.length))
    return 0


def _table(rows: list[dict], evals: list[str], length: int) -> str:
    name = {"full": "Full attention"} | {e: f"LSH-{e[3:]}" for e in evals if e != "full"}
    corner = f"train / eval (|w|={length})"
    head = f"{corner:<24}" + "".join(f"{name.get(e, e):>16}" for e in evals)
    lines = [head, "-" * len(head)]
    for r in rows:
        label = name.get(r["train"], f"LSH-{r['train'][3:]}")
        lines.append(f"{label:<24}" + "".join(f"{r[e]:>15.1f}%" for e in evals))
    return "\n".join(lines)


if __name__ == "__main__":  # the same as `tfamily repro reformer-duplication`
    from ..cli import main
    sys.exit(main(["repro", "reformer-duplication", *sys.argv[1:]]))
