"""`tfamily train`, `tfamily eval`, `tfamily generate`, `tfamily demo`.

    tfamily train -c demo model.depth.n_layers=6 train.lr=2e-3 --steps 2000 --json
    tfamily train --resume runs/train/demo --steps 4000
    tfamily eval runs/train/demo --split test --json
    tfamily eval runs/gpt2 --data my_text.txt
    tfamily generate runs/train/demo --prompt "ROMEO:" --tokens 400
    torchrun --standalone --nproc_per_node=2 -m tfamily.cli train -c demo
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from ..settings import commands
from ..settings.run import Config, flag_overrides
from ..settings.schema import add_flags


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a member on a corpus or synthetic task (YAML/TOML config + key=value)",
                       description="Train a family member. Settings come from a config file (-c) and "
                                   "key=value overrides with dotted keys into the sections member, model "
                                   "(spec overrides), data and train, e.g. model.heads.n_kv_heads=2 train.lr=3e-3.")
    add_flags(p, commands.Train)
    add_flags(p, Config, overrides=True)
    p.set_defaults(func=_train)
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out data")
    add_flags(p, commands.Eval)
    p.set_defaults(func=_eval)
    p = sub.add_parser("generate", help="sample text from a checkpoint")
    add_flags(p, commands.Generate)
    p.set_defaults(func=_generate)
    p = sub.add_parser("demo", help="train a small character GPT on Tiny Shakespeare (~5 min on 2 cores), "
                                    "print validation bpc and a sample")
    add_flags(p, commands.Demo)
    p.set_defaults(func=_demo)


def _finite(value):
    """``value`` with every non-finite float replaced by None: JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _print_result(result: dict, as_json: bool, title: str, split: str = "val") -> None:
    if as_json:
        print(json.dumps(_finite(result), allow_nan=False))
        return
    keys = ("member", "params", "steps", "tokens", "wall_s", "tokens_per_s", "train_loss", f"{split}_loss",
            f"{split}_bpc", f"{split}_acc", "checkpoint")
    print(title)
    for k in keys:
        v = result.get(k)
        if v is not None:
            print(f"  {k:<13} {v:.4f}" if isinstance(v, float) else f"  {k:<13} {v}")


def check_data_dir(data_dir: str | None) -> None:
    """A ``--data-dir`` must be an existing directory: searching past a missing one would
    quietly read ``$TFAMILY_DATA`` or the cache instead of what was asked for."""
    if data_dir is None:
        return
    path = Path(data_dir).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--data-dir {path} does not exist; create it and put the data there, or drop "
                                f"--data-dir to use $TFAMILY_DATA / the user cache")
    if not path.is_dir():
        raise NotADirectoryError(f"--data-dir {path} is a file, not a directory; pass the directory that "
                                 f"holds the data")


def check_out(out: str | None) -> None:
    """Create the run directory ``out`` now and check it takes files, so a bad ``--out``
    fails before any training rather than at the first checkpoint."""
    if out is None:
        return
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"--out {path} is a file, not a directory; pick a directory path for the run")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise PermissionError(f"--out {path} cannot be used as a run directory ({e.strerror or e}); "
                              f"pick a writable directory") from e


def _train(args) -> int:
    from . import fit, loop
    from .checkpoint import load as load_checkpoint
    from .config import check_resume, load
    overrides = flag_overrides(args)
    check_data_dir(args.data_dir)
    if args.resume:
        if args.config:
            raise ValueError("--resume takes its config from the checkpoint; drop -c/--config "
                             "(key=value overrides still apply)")
        check_resume(load_checkpoint(args.resume).meta, overrides)
        cfg = fit.resume_config(args.resume, overrides)
    else:
        if overrides.get("train.init_from") and "member" not in overrides:  # the start line names the checkpoint's
            from .finetune import source_spec
            overrides["member"] = source_spec(str(overrides["train.init_from"]))["member"]
        cfg = load(args.config, overrides, base={"size": "auto"})  # a config file or --size decides first
        if int(os.environ.get("RANK", "0")) == 0:
            check_out(cfg.train.out)
    from .checkpoint import resolve, resumable
    run_dir = (lambda: resolve(args.resume).parent.parent) if args.resume else (
        lambda: Path(cfg.train.out or f"runs/train/{cfg.run_name}"))
    try:
        with resumable(run_dir, "tfamily train --resume"):
            result = fit.train(cfg, data_dir=args.data_dir, resume=args.resume)
    except loop.NonFiniteLoss as e:
        print(f"tfamily train: stopped: {e}", file=sys.stderr)
        return 3
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        _print_result(result, args.json, f"trained {result['member']} for {result['steps']} steps")
    return 0


def _eval(args) -> int:
    from .sample import evaluate_trained, load_trained
    check_data_dir(args.data_dir)
    tr = load_trained(args.checkpoint, args.device)
    result = evaluate_trained(tr, split=args.split, max_tokens=args.max_tokens, batch_size=args.batch_size,
                              precision=args.precision, data_dir=args.data_dir, mem_len=args.mem_len,
                              threads=args.threads, data=args.data)
    note = f" ({result['split_note']})" if result.get("split_note") else ""
    _print_result(result, args.json, f"{result['name']} at step {result['steps']} on the {args.split} split of "
                                     f"{result['corpus']}{note}", args.split)
    loss = result[f"{args.split}_loss"]
    if not math.isfinite(loss):
        print(f"tfamily eval: error: the {args.split} loss is not finite ({loss}); the weights "
              f"in {result['checkpoint']} are broken: evaluate an earlier checkpoint", file=sys.stderr)
        return 3
    return 0


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def unescape(text: str) -> str:
    """``--stop "\\n"``: a shell passes backslash-n, which users mean as a newline (as ``printf`` and
    ``echo -e`` read it); any other backslash stays as typed."""
    return re.sub(r"\\([ntr\\])", lambda m: _ESCAPES[m.group(1)], text)


def _generate(args) -> int:
    from .sample import load_trained, sample_text, stream_text
    prompts = args.prompt or [""]
    tr = load_trained(args.checkpoint, args.device)
    kw = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, greedy=args.greedy, seed=args.seed,
              stop=[unescape(s) for s in args.stop], threads=args.threads)
    if len(prompts) > 1:
        print("\n\n".join(p + t for p, t in zip(prompts, sample_text(tr, prompts, args.tokens, **kw))))
        return 0
    steps = stream_text(tr, prompts[0], args.tokens, **kw)  # checks everything before the prompt is printed
    print(prompts[0], end="", flush=True)
    for pieces in steps:
        print(pieces[0], end="", flush=True)
    print()
    return 0


def _demo(args) -> int:
    from .demo import run
    check_data_dir(args.data_dir)
    return run(args)
