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

from ..compare import add_compare_args  # compare.py imports no torch at module level
from ..options import renamed
from .sweep import POPGYM_EASY
from .sweep import TORSOS as SWEEP_TORSOS  # sweep.py imports no torch at module level

TORSOS = "gtrxl | trxl_i | transformer_xl | lstm | gru (or any member with XL memory)"
DEFAULTS = {"lr": 5e-4, "n_envs": 32, "rollout": 64, "epochs": 4, "minibatches": 2, "d_model": 64, "layers": 2,
            "heads": 4, "mem_len": 64}
# flag -> where a run's config keeps it: (section, key); "task_params" is data.task_params
SAVED = {"env": ("data", "task"), "member": ("member", None), "seed": ("train", "seed"), "lr": ("train", "lr"),
         "n_envs": ("task_params", "n_envs"), "rollout": ("task_params", "rollout"),
         "epochs": ("task_params", "epochs"), "minibatches": ("task_params", "minibatches"),
         "d_model": ("model", "d_model"), "layers": ("model", "n_layers"), "heads": ("model", "n_heads"),
         "mem_len": ("model", "mem_len"), "gate_bias": ("model", "gate_bias")}


def add_parser(sub) -> None:
    rl = sub.add_parser("rl", help="reinforcement learning: PPO with memory torsos on gymnasium/POPGym",
                        description="PPO (clipped objective, GAE) with an actor-critic whose torso is a "
                                    "family stack with XL memory or an LSTM/GRU, on the shared training loop.")
    rsub = rl.add_subparsers(dest="rl_command", metavar="COMMAND")
    p = rsub.add_parser("train", help="train a policy")
    p.add_argument("--env", help="gymnasium id, e.g. popgym-RepeatFirstEasy-v0")
    p.add_argument("--member", help=f"torso: {TORSOS} (default gtrxl)")
    p.add_argument("--steps", type=int, help="environment steps (at least one rollout: n_envs x rollout)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--out", metavar="DIR", help="run directory (default runs/rl/<env>-<member>-s<seed>)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR exactly (--steps: a new total)")
    _run_settings(p)
    p.add_argument("--gate-bias", type=float, metavar="B_G",
                   help="the residual gate's b_g (gtrxl: default 2; 0 is the paper's ablation)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_train)

    s = rsub.add_parser("sweep", help="every (env, torso, seed) run of a comparison; resumable",
                        description="Train each run in OUT/<env>/<label>-s<seed>; a finished run is skipped, "
                                    "a killed one resumes from its checkpoint (run the same command again).")
    s.add_argument("--envs", nargs="+", default=list(POPGYM_EASY), metavar="ENV",
                   help="gymnasium ids (default: the five POPGym Easy tasks)")
    s.add_argument("--members", nargs="+", default=list(SWEEP_TORSOS), metavar="TORSO",
                   help="torsos: a member or MEMBER:gate_bias=X (label MEMBER_bgX); default: "
                        + " ".join(SWEEP_TORSOS))
    s.add_argument("--seeds", type=int, default=3, help="trials per (env, torso): seeds 0..N-1")
    s.add_argument("--steps", type=int, required=True, help="environment steps per run")
    s.add_argument("--out", required=True, metavar="DIR")
    s.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    s.add_argument("--threads", type=int, help="torch threads per run (default: cores / jobs when --jobs > 1)")
    s.add_argument("--shard", metavar="I/N", help="only every N-th run, from the I-th (0-based)")
    s.add_argument("--dry-run", action="store_true", help="list the runs and their status, train nothing")
    _run_settings(s)
    s.set_defaults(func=_sweep)

    t = rsub.add_parser("table", help="MMER table (markdown, CSV, JSON) and curves of a sweep directory")
    t.add_argument("dir", metavar="DIR")
    t.add_argument("--out", metavar="DIR", help="where to write (default: DIR)")
    t.add_argument("--baselines", metavar="JSON", help="published rows to print beside ours (see rl/table.py)")
    t.add_argument("--reach", type=float, metavar="RETURN",
                   help="add the env steps until the batch-mean return first reached RETURN")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_table)

    e = rsub.add_parser("eval", help="mean return of a trained run over N episodes")
    e.add_argument("run", metavar="RUN")
    e.add_argument("--episodes", type=int, default=32)
    e.add_argument("--seed", type=int, help="evaluation seed (default: the run's)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_eval)

    c = rsub.add_parser("compare", help="alias of `tfamily compare`: final metrics in a table, curves in one PNG")
    add_compare_args(c, default_out="runs/rl/curves.png")
    rl.set_defaults(func=lambda args: rl.print_help() or 2)


def _run_settings(p) -> None:
    """Rollout, PPO, torso and loop options shared by train and sweep."""
    p.add_argument("--time", metavar="DUR", help="wall-clock budget (per run), e.g. 5m")
    renamed(p, "--time", "--time-budget")
    # Defaults are filled in by _shared, so a resumed run can tell a given flag from a default.
    p.add_argument("--lr", type=float, help=f"default {DEFAULTS['lr']}")
    p.add_argument("--n-envs", type=int, help=f"default {DEFAULTS['n_envs']}")
    p.add_argument("--rollout", type=int, help=f"steps per environment per rollout (default {DEFAULTS['rollout']})")
    p.add_argument("--epochs", type=int, help=f"default {DEFAULTS['epochs']}")
    p.add_argument("--minibatches", type=int, help=f"default {DEFAULTS['minibatches']}")
    p.add_argument("--d-model", type=int, help=f"default {DEFAULTS['d_model']}")
    p.add_argument("--layers", type=int, help=f"default {DEFAULTS['layers']}")
    p.add_argument("--heads", type=int, help=f"default {DEFAULTS['heads']}")
    p.add_argument("--mem-len", type=int, help=f"default {DEFAULTS['mem_len']}")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="other rl settings: clip, vf_coef, ent_coef, gamma, lam, eval_episodes")
    p.add_argument("--ckpt-every", type=int, metavar="UPDATES",
                   help="checkpoint every this many PPO updates (default: every 10 rollouts)")
    p.add_argument("--no-progress", action="store_true")


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
    given.update(_settings(args.set))
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
    from ..train.rundir import pause_point
    pause_point("args")  # test hook: a second process racing for the run directory (tests/rl/test_faults.py)
    from pathlib import Path

    from ..interrupt import resumable
    from ..train.checkpoint import resolve
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
    settings.update(_settings(args.set))
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
