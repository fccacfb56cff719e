"""MNIST pixel decoders: local 2D attention against dense causal attention, same wall-clock budget.

`tfamily repro mnist-local2d --out DIR --time 4m` trains two autoregressive pixel
models on the MNIST t10k file split 9,000 train / 1,000 test (``load_mnist_t10k``):

* ``local_2d``: the Image Transformer's local 2D attention (Parmar et al. 2018,
  section 3.2, fig. 2): pixels in block-raster order, query blocks of
  ``--query-block`` pixels, a memory flange of ``--memory`` rows above and columns
  left and right, executed by the block-sparse kernel (tiles = one query block);
* ``dense``: causal attention over pixels in raster order (SDPA).

Both models have the same shape and initial weights (the pattern has no parameters),
see the same images in the same batches (``train/tasks/pixels.PixelTask``), and train
through the shared loop (``train.Trainer``) for the same wall-clock ``--time`` each
(training plus its curve evaluations), with a warm-up + cosine schedule whose end
follows the measured step rate. Intensities are quantised to ``--levels`` bins (256 =
all 8 bits); both models are scored on that same quantisation: test bits per dimension
= summed NLL in nats / (ln 2 * pixels) over the test images. The pixel order differs
between the models, but each gives an exact likelihood of the same quantised image,
so the numbers compare.

Outputs under ``--out``: results.json / results.csv (one row per model), curves.json /
curves.csv (train and test bpd against training seconds), config.json, curves.png,
samples_<model>.png (a grid of digits sampled pixel by pixel with the KV cache), and
each model's run directory (logs and final checkpoint). The models are cells of the one grid
runner (``train/grid.py``): a rerun over the same ``--out`` skips a finished model, ``--shard i/n``
trains every n-th.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..bench.results import print_rows, write_rows
from ..train import grid as runner
from .plots import save_curves, save_grid
from ..settings.schema import add_flags, setting

MODELS = ("local_2d", "dense")
SIDE = 28
FIELDS = ["model", "pattern", "kernel", "order", "query_block", "memory", "density", "density_vs_causal", "levels",
          "test_bpd", "test_images", "steps", "images_seen", "train_s", "steps_per_s", "sample_s",
          "cache_max_abs_diff", "batch_size", "params", "precision", "samples_png"]


@dataclass
class Settings:
    """`tfamily repro mnist-local2d`."""
    time: str = setting("4m", flag=True, old=("--budget",),
                        help="wall-clock time per model (training and curve points): "
                             "300, 90s, 4m, 1h")
    steps: int | None = setting(None, flag=True, lo=0, old=("--max-steps",), help="also stop after this many steps")
    levels: int = setting(256, flag=True, lo=0, help="intensity bins per pixel (256 = 8 bits)")
    batch_size: int = setting(8, flag=True, lo=0)
    d_model: int = setting(128, flag=True, lo=0)
    layers: int = setting(4, flag=True, lo=0)
    heads: int = setting(4, flag=True, lo=0)
    # 1e-3: the image_transformer_2d preset (post-norm, GPT-2's init, no logit scale) stays at the pixels'
    # marginal distribution at 3e-3 (2.025 bits/dim for both models; docs/results/sparse.md)
    lr: float = setting(1e-3, flag=True)
    warmup: int = setting(20, flag=True, lo=0)
    query_block: list[int] = setting([7, 7], flag=True, nargs=2, metavar=("H", "W"))
    memory: list[int] = setting([7, 7], flag=True, nargs=2, metavar=("ROWS", "COLS"),
                                help="flange: rows above, columns left and right of the query block")
    train_images: int | None = setting(None, flag=True, lo=0, help="use only the first N training images")
    test_images: int = setting(1000, flag=True, lo=0, help="score the first N of the 1,000 test images")
    curve_images: int = setting(100, flag=True, lo=0, help="test images scored during training")
    eval_every: int = setting(100, flag=True, lo=0, help="training steps between curve points")
    eval_batch: int = setting(50, flag=True, lo=0)
    samples: int = setting(16, flag=True, lo=0)
    temperature: float = setting(1.0, flag=True)
    models: list[str] = setting(list(MODELS), flag=True, help=f"subset of {', '.join(MODELS)}")
    precision: str = setting("auto", flag=True, choices=("auto", "bf16", "fp32"))
    device: str = setting("cpu", flag=True)
    threads: int | None = setting(None, flag=True, lo=0, help="torch threads (default: torch's)")
    data_dir: str | None = setting(None, flag=True)
    seed: int = setting(0, flag=True, lo=0)
    out: str = setting("runs/repro/mnist-local2d", flag=True)
    shard: str | None = setting(None, flag=True, metavar="I/N", help=runner.SHARD_HELP)
    json: bool = setting(False, flag=True)


def add_args(p) -> None:
    add_flags(p, Settings)


def check_args(args) -> None:
    bad = [m for m in args.models if m not in MODELS]
    if bad:
        raise ValueError(f"--models {' '.join(bad)}: unknown; choose from {', '.join(MODELS)}")
    qh, qw = args.query_block
    if qh < 1 or qw < 1 or SIDE % qh or SIDE % qw:
        raise ValueError(f"--query-block {qh} {qw} must divide the 28 x 28 image; e.g. 7 7, 4 7 or 4 14")
    for name in ("batch_size", "d_model", "layers", "heads", "samples", "eval_batch", "test_images",
                 "curve_images", "eval_every"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.d_model % args.heads:
        raise ValueError(f"--d-model {args.d_model} must be divisible by --heads {args.heads}")


def spec_for(kind: str, args):
    """The Image Transformer member at the experiment's shape; only pattern and kernel differ."""
    from .. import members
    qh, qw = args.query_block
    mh, mw = args.memory
    common = dict(d_model=args.d_model, dropout=0.0, vocab_size=args.levels, depth__n_layers=args.layers,
                  heads__n_heads=args.heads, position__max_len=SIDE * SIDE)
    if kind == "local_2d":
        params = dict(width=SIDE, block_h=qh, block_w=qw, memory_h=mh, memory_w=mw)
        return members.image_transformer_2d(**common, pattern={"name": "local_2d", "params": params},
                                            kernel={"name": "blocksparse", "params": {"block_size": qh * qw}})
    return members.image_transformer_2d(**common, pattern={"name": "causal", "params": {}},
                                        kernel={"name": "sdpa", "params": {}})


def order_for(kind: str, args):
    from ..data.pixels import PixelOrder
    return PixelOrder(SIDE, SIDE, tuple(args.query_block) if kind == "local_2d" else None)


def density(spec) -> dict:
    """Fraction of the L x L score matrix the pattern keeps, and that fraction over causal's."""
    from ..nn.patterns import dense_mask, resolve
    n = SIDE * SIDE
    kept = int(dense_mask(resolve(spec.pattern), n, n).sum())
    return {"density": kept / n ** 2, "density_vs_causal": kept / (n * (n + 1) // 2)}


@torch.no_grad()
def cache_mismatch(model, x: Tensor) -> float:
    """Max |logit difference| between one full forward pass over ``x`` (b, n) and n cached
    one-token steps: 0 up to rounding when cached decoding applies the pattern at the
    same absolute positions as training does."""
    was = model.training
    model.eval()
    full = model(x)
    state = model.new_state()
    steps = torch.cat([model(x[:, i:i + 1], state=state) for i in range(x.shape[1])], dim=1)
    model.train(was)
    return (full - steps).abs().max().item()


def config_for(kind: str, args, out: Path):
    """The shared loop's settings for one model (the data section only labels the run)."""
    from ..train.config import load
    return load(None, {
        "member": "image_transformer_2d", "name": kind, "data.corpus": "mnist-t10k",
        "train.batch_size": args.batch_size, "train.max_steps": args.steps, "train.time_budget": args.time,
        "train.lr": args.lr, "train.warmup": args.warmup, "train.weight_decay": 0.1, "train.betas": [0.9, 0.95],
        "train.min_lr_ratio": 0.1, "train.grad_clip": 1.0, "train.precision": args.precision,
        "train.device": args.device, "train.threads": args.threads, "train.seed": args.seed,
        "train.eval_every": args.eval_every, "train.eval_tokens": args.curve_images * SIDE * SIDE,
        "train.eval_batch_size": args.eval_batch, "train.log_every": 1, "train.ckpt_every": None,
        "train.keep": 1, "train.out": str(out / kind), "train.tensorboard": False, "train.progress": False})


def curve_points(kind: str, run_dir: Path, evals: list[dict], untrained: dict) -> list[dict]:
    """Test bpd at every evaluation (``untrained``, then the run's ``evals``), with the mean train bpd of
    the steps since the previous one (from ``run_dir``'s train.csv)."""
    from ..train.metrics import read_csv
    losses = {int(r["step"]): float(r["loss"]) for r in read_csv(run_dir / "train.csv")}
    points, prev = [], 0
    for e in [untrained, *evals]:
        seen = [losses[s] / math.log(2) for s in range(prev + 1, e["step"] + 1) if s in losses]
        points.append({"model": kind, "step": e["step"], "train_s": round(e["train_s"], 2),
                       "train_bpd": round(sum(seen) / len(seen), 4) if seen else None,
                       "curve_test_bpd": round(e["bpd"], 4)})
        prev = e["step"]
    return points


def train_one(kind: str, split, args, out: Path) -> tuple[dict, list[dict]]:
    from ..data.pixels import PixelSequences
    from ..models.generate import generate
    from ..train.device import autocast
    from ..train.evaluate import evaluate
    from ..train.loop import Trainer
    from ..train.tasks.pixels import PixelTask
    order = order_for(kind, args)
    train_images = split.train_images[:args.train_images] if args.train_images else split.train_images
    task = PixelTask(f"mnist-{order.name}", PixelSequences(train_images, args.levels, order),
                     PixelSequences(split.test_images, args.levels, order), args.batch_size, seed=args.seed)
    spec = spec_for(kind, args)
    trainer = Trainer(config_for(kind, args, out), task=task, spec=spec)
    try:
        untrained = {"step": 0, "train_s": 0.0, **trainer.evaluate()}  # about log2(levels) bits per dimension
        result = trainer.fit()
    finally:
        trainer.close()
    model, device, precision = trainer.model, trainer.device, trainer.precision
    e = evaluate(model, task.eval_batches(args.test_images * SIDE * SIDE, args.eval_batch), device=device,
                 precision=precision, metrics=task.eval_metrics)
    t1 = time.perf_counter()
    start = torch.full((args.samples, 1), task.test.start, dtype=torch.long, device=device)
    with autocast(device, precision):
        seqs = generate(model, start, SIDE * SIDE, temperature=args.temperature,
                        generator=torch.Generator(device=device).manual_seed(args.seed))[:, 1:]
    sample_s = time.perf_counter() - t1
    mismatch = cache_mismatch(model, task.test.batch(torch.arange(1))["x"].to(device))
    grid = out / f"samples_{kind}.png"
    save_grid(task.test.to_images(seqs.cpu()), grid,
              f"{kind} ({order.name}): test {e['bpd']:.3f} bits/dim, {args.levels} levels")
    steps, train_s = result["steps"], result["train_s"]
    row = {"model": kind, "pattern": spec.pattern.name, "kernel": spec.kernel.name, "order": order.name,
           **({"query_block": "x".join(map(str, args.query_block)), "memory": "x".join(map(str, args.memory))}
              if kind == "local_2d" else {"query_block": "", "memory": ""}),
           **{k: round(v, 4) for k, v in density(spec).items()},
           "levels": args.levels, "test_bpd": round(e["bpd"], 4), "test_images": e["tokens"] // (SIDE * SIDE),
           "steps": steps, "images_seen": steps * args.batch_size, "train_s": round(train_s, 1),
           "steps_per_s": round(steps / max(train_s, 1e-9), 3), "sample_s": round(sample_s, 1),
           "cache_max_abs_diff": mismatch, "batch_size": args.batch_size, "params": result["params"],
           "precision": precision, "samples_png": str(grid)}
    return row, curve_points(kind, trainer.run_dir, trainer.evals, untrained)


def run(args) -> int:
    from ..data import load_mnist_t10k
    check_args(args)  # a ValueError: `tfamily repro: error: ...`, exit status 2
    split = load_mnist_t10k(args.data_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shared = runner.args_plan(args, drop=("models",))
    cells = [(out / kind, {**shared, "model": kind}) for kind in dict.fromkeys(args.models)]

    def work(d: Path) -> dict:
        row, pts = train_one(d.name, split, args, out)
        return {"row": row, "curve": pts}
    done = [r for r in runner.run_cells(cells, work, shard=args.shard, log=lambda m: print(m, file=sys.stderr))
            if r is not None]
    if not done:
        return 0
    rows, curve = [r["row"] for r in done], [c for r in done for c in r["curve"]]
    given = {k: v for k, v in vars(args).items() if k not in ("func", "settings_")}
    (out / "config.json").write_text(json.dumps(given, indent=1))
    write_rows(out, "results", rows, FIELDS)
    write_rows(out, "curves", curve, ["model", "step", "train_s", "train_bpd", "curve_test_bpd"])
    save_curves(curve, rows, out / "curves.png")
    print_rows(rows, [("model", "model", "<10"), ("test_bpd", "test bpd", ">10.4f"), ("steps", "steps", ">8"),
                      ("train_s", "train s", ">9.0f"), ("samples_png", "samples", "<")], args.json)
    return 0


if __name__ == "__main__":  # the same as `tfamily repro mnist-local2d`
    from ..cli import main
    sys.exit(main(["repro", "mnist-local2d", *sys.argv[1:]]))
