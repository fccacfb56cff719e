"""`tfamily rl train | eval | compare`: PPO with memory torsos on gymnasium / POPGym.

    tfamily rl train --env popgym-RepeatFirstEasy-v0 --member gtrxl --steps 200000 --seed 0
    tfamily rl train --resume runs/rl/popgym-RepeatFirstEasy-v0-gtrxl-s0 --steps 400000
    tfamily rl eval runs/rl/popgym-RepeatFirstEasy-v0-gtrxl-s0 --episodes 64 --json
    tfamily rl compare runs/rl/* --out curves.png --json
    tfamily rl sweep --envs popgym-RepeatFirstEasy-v0 --members gtrxl lstm gtrxl:gate_bias=0 --seeds 3 \
        --steps 1000000 --out runs/rl/sweep      # resumable: run it again after a kill
    tfamily rl table runs/rl/sweep              # MMER table (md, csv, json) and curves/<env>.png
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..compare import add_compare_args  # compare/__init__.py imports no torch at module level
from ..settings.schema import add_flags
from .settings import DEFAULTS, SAVED, Eval, Run, Sweep, Table, Train  # no torch at module level


def add_parser(sub) -> None:
    rl = sub.add_parser("rl", help="reinforcement learning: PPO with memory torsos on gymnasium/POPGym",
                        description="PPO (clipped objective, GAE) with an actor-critic whose torso is a "
                                    "family stack with XL memory or an LSTM/GRU, on the shared training loop.")
    rsub = rl.add_subparsers(dest="rl_command", metavar="COMMAND")
    p = rsub.add_parser("train", help="train a policy")
    add_flags(p, Train, overrides=True)  # rl/train.py checks them; --resume tells given from default
    add_flags(p, Run, overrides=True)
    p.set_defaults(func=_train)
    s = rsub.add_parser("sweep", help="every (env, torso, seed) run of a comparison; resumable",
                        description="Train each run in OUT/<env>/<label>-s<seed>; a finished run is skipped, "
                                    "a killed one resumes from its checkpoint (run the same command again).")
    add_flags(s, Sweep)
    add_flags(s, Run, overrides=True)
    s.set_defaults(func=_sweep)
    t = rsub.add_parser("table", help="MMER table (markdown, CSV, JSON) and curves of a sweep directory")
    add_flags(t, Table)
    t.set_defaults(func=_table)
    e = rsub.add_parser("eval", help="mean return of a trained run over N episodes")
    add_flags(e, Eval)
    e.set_defaults(func=_eval)
    c = rsub.add_parser("compare", help="alias of `tfamily compare`: final metrics in a table, curves in one PNG")
    add_compare_args(c, default_out="runs/rl/curves.png")
    rl.set_defaults(func=lambda args: rl.print_help() or 2)


def _settings(items: list[str]) -> dict:
    from ..settings.schema import parse_value
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r} is not key=value; e.g. --set ent_coef=0.01")
        out[key] = parse_value(value)
    return out


def _resume_overrides(args) -> dict:
    """The dotted overrides a resumed run honours (--steps as a new total, --time,
    --ckpt-every, --no-progress); any other flag given must equal what the run was trained with."""
    from pathlib import Path

    from ..train import checkpoint
    from .train import check_rl_run
    ck = checkpoint.load(args.resume)
    check_rl_run(ck)
    cfg, run = ck.meta["config"], ck.path.parent.parent
    if args.out is not None and Path(args.out).expanduser().resolve() != run.resolve():
        raise ValueError(f"--resume continues in the run's own directory {run}; drop --out {args.out} (to branch "
                         f"a run, copy its directory and resume the copy)")
    given = {k: getattr(args, k) for k in SAVED if getattr(args, k) is not None}
    given.update(_settings(args.set or []))
    for key, value in given.items():
        section, name = SAVED.get(key, ("task_params", key))
        if section == "task_params" and name not in cfg["data"]["task_params"]:
            raise ValueError(f"unknown rl setting --set {key}; valid: {', '.join(sorted(cfg['data']['task_params']))}")
        saved = (cfg.get(section) if name is None else cfg["data"]["task_params"].get(name)
                 if section == "task_params" else (cfg.get(section) or {}).get(name))
        if value != saved:
            flag = f"--{key.replace('_', '-')}" if key in SAVED else f"--set {key}="
            raise ValueError(f"--resume continues {run} as it was trained, with {key} {saved!r}, not {value!r}; drop "
                             f"{flag.rstrip('=')} (different settings need a new run: --out DIR without --resume)")
    overrides = {}
    if args.steps is not None:
        params = cfg["data"]["task_params"]
        per = params["epochs"] * params["minibatches"]
        overrides["train.max_steps"] = math.ceil(args.steps / (params["n_envs"] * params["rollout"])) * per
    if args.time:
        overrides["train.time_budget"] = args.time
    if args.ckpt_every is not None:
        overrides["train.ckpt_every"] = args.ckpt_every
    if args.no_progress:
        overrides["train.progress"] = False
    return overrides


def _train(args) -> int:
    from ..train.loop import NonFiniteLoss
    from .train import rl_config, train
    try:
        result = _train_run(args, rl_config, train)
    except NonFiniteLoss as e:  # as `tfamily train`: one line, exit 3, the last checkpoint kept
        print(f"tfamily rl: stopped: {str(e).split(' Try ')[0]} Try a lower --lr.", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['run_dir']}: {result['tokens']} env steps at {result['tokens_per_s']:.0f}/s, "
              f"train mean return {result.get('train_mean_return')}, eval return {result.get('val_return')}")
    return 0


def _train_run(args, rl_config, train) -> dict:
    from pathlib import Path

    from ..train.checkpoint import resolve, resumable
    if args.resume:
        with resumable(lambda: resolve(args.resume).parent.parent, "tfamily rl train --resume"):
            return train(resume=args.resume, overrides=_resume_overrides(args))
    if not args.env or args.steps is None:
        raise ValueError("rl train needs --env ENV and --steps N (or --resume DIR)")
    settings, torso = _shared(args)
    if args.gate_bias is not None:
        torso["gate_bias"] = args.gate_bias
    cfg = rl_config(args.env, args.member or "gtrxl", args.steps, seed=args.seed or 0, out=args.out,
                    lr=_given(args, "lr"), time_budget=args.time, torso=torso, settings=settings,
                    progress=not args.no_progress, ckpt_every=args.ckpt_every)
    with resumable(lambda: Path(cfg.train.out), "tfamily rl train --resume"):
        return train(cfg)


def _given(args, name: str):
    v = getattr(args, name)
    return DEFAULTS[name] if v is None else v


def _shared(args) -> tuple[dict, dict]:
    settings = {k: _given(args, k) for k in ("n_envs", "rollout", "epochs", "minibatches")}
    settings.update(_settings(args.set or []))
    torso = {"d_model": _given(args, "d_model"), "n_layers": _given(args, "layers"),
             "n_heads": _given(args, "heads"), "mem_len": _given(args, "mem_len")}
    return settings, torso


def _sweep(args) -> int:
    from .sweep import plan, status, stderr_log, sweep
    settings, model = _shared(args)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be an integer >= 1 (torch threads per run), got {args.threads}; "
                         f"leave it out for cores / jobs")
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():  # checked before planning, so --dry-run refuses it too
        raise NotADirectoryError(f"--out {args.out} is a file, not a directory; pick a directory path for the "
                                 f"sweep's runs")
    runs = plan(args.envs, args.members, args.seeds, args.steps, args.out, settings=settings, model=model,
                lr=_given(args, "lr"), ckpt_every=args.ckpt_every, shard=args.shard)
    if args.dry_run:
        for i, run in enumerate(runs, 1):
            kind, step = status(run)
            print(f"[{i}/{len(runs)}] {run.dir}: {kind}" + ("" if step is None else f" (update {step})"))
        return 0
    sweep(runs, jobs=args.jobs, progress=not args.no_progress, time_budget=args.time,
          threads=args.threads, log=stderr_log)
    print(f"{len(runs)} runs in {args.out}; table: tfamily rl table {args.out}")
    return 0


def _table(args) -> int:
    from .table import write
    report = write(args.dir, args.out, args.baselines, args.reach)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "text"}, indent=1))
    else:
        print(report["text"], end="")
        print(f"written: {report['markdown']}, {report['csv']}, plots: {', '.join(report['plots'].values())}")
    return 0


def _eval(args) -> int:
    from .train import evaluate_run
    out = evaluate_run(args.run, args.episodes, seed=args.seed)
    print(json.dumps(out, indent=1) if args.json else
          f"{out['env']} {out['member']}: mean return {out['mean_return']:.4f} +- {out['std_return']:.4f} "
          f"over {out['episodes']} episodes")
    return 0
