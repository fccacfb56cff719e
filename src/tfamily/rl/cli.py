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

from ..compare import add_compare_args  # compare.py imports no torch at module level
from .sweep import POPGYM_EASY
from .sweep import TORSOS as SWEEP_TORSOS  # sweep.py imports no torch at module level

TORSOS = "gtrxl | trxl_i | transformer_xl | lstm | gru (or any member with XL memory)"


def add_parser(sub) -> None:
    rl = sub.add_parser("rl", help="reinforcement learning: PPO with memory torsos on gymnasium/POPGym",
                        description="PPO (clipped objective, GAE) with an actor-critic whose torso is a "
                                    "family stack with XL memory or an LSTM/GRU, on the shared training loop.")
    rsub = rl.add_subparsers(dest="rl_command", metavar="COMMAND")
    p = rsub.add_parser("train", help="train a policy")
    p.add_argument("--env", help="gymnasium id, e.g. popgym-RepeatFirstEasy-v0")
    p.add_argument("--member", default="gtrxl", help=f"torso: {TORSOS}")
    p.add_argument("--steps", type=int, help="environment steps (at least one rollout: n_envs x rollout)")
    p.add_argument("--seed", type=int, default=0)
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
    p.add_argument("--time-budget", metavar="DUR", help="wall-clock budget (per run), e.g. 5m")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--n-envs", type=int, default=32)
    p.add_argument("--rollout", type=int, default=64, help="steps per environment per rollout")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mem-len", type=int, default=64)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="other rl settings: clip, vf_coef, ent_coef, gamma, lam, eval_episodes")
    p.add_argument("--ckpt-every", type=int, metavar="UPDATES",
                   help="checkpoint every this many PPO updates (default: every 10 rollouts)")
    p.add_argument("--no-progress", action="store_true")


def _settings(items: list[str]) -> dict:
    from ..train.config import parse_value
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r} is not key=value; e.g. --set ent_coef=0.01")
        out[key] = parse_value(value)
    return out


def _train(args) -> int:
    from .train import rl_config, train
    if args.resume:
        overrides = {}
        if args.steps is not None:
            from ..train import checkpoint
            params = checkpoint.load(args.resume).meta["config"]["data"]["task_params"]
            per = params["epochs"] * params["minibatches"]
            overrides["train.max_steps"] = math.ceil(args.steps / (params["n_envs"] * params["rollout"])) * per
        if args.time_budget:
            overrides["train.time_budget"] = args.time_budget
        if args.no_progress:
            overrides["train.progress"] = False
        result = train(resume=args.resume, overrides=overrides)
    else:
        if not args.env or args.steps is None:
            raise ValueError("rl train needs --env ENV and --steps N (or --resume DIR)")
        settings, torso = _shared(args)
        if args.gate_bias is not None:
            torso["gate_bias"] = args.gate_bias
        cfg = rl_config(args.env, args.member, args.steps, seed=args.seed, out=args.out, lr=args.lr,
                        time_budget=args.time_budget, torso=torso, settings=settings,
                        progress=not args.no_progress, ckpt_every=args.ckpt_every)
        result = train(cfg)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['run_dir']}: {result['tokens']} env steps at {result['tokens_per_s']:.0f}/s, "
              f"train mean return {result.get('train_mean_return')}, eval return {result.get('val_return')}")
    return 0


def _shared(args) -> tuple[dict, dict]:
    settings = {"n_envs": args.n_envs, "rollout": args.rollout, "epochs": args.epochs,
                "minibatches": args.minibatches, **_settings(args.set)}
    torso = {"d_model": args.d_model, "n_layers": args.layers, "n_heads": args.heads, "mem_len": args.mem_len}
    return settings, torso


def _sweep(args) -> int:
    from .sweep import plan, status, stderr_log, sweep
    settings, model = _shared(args)
    runs = plan(args.envs, args.members, args.seeds, args.steps, args.out, settings=settings, model=model,
                lr=args.lr, ckpt_every=args.ckpt_every, shard=args.shard)
    if args.dry_run:
        for i, run in enumerate(runs, 1):
            kind, step = status(run)
            print(f"[{i}/{len(runs)}] {run.dir}: {kind}" + ("" if step is None else f" (update {step})"))
        return 0
    sweep(runs, jobs=args.jobs, progress=not args.no_progress, time_budget=args.time_budget,
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
