"""`tfamily rl`'s settings, declared once (``settings/schema.py``): each field is a flag with its
help and default. A run's settings (``Run``) are flags whose default is filled in only when not
given, so that ``--resume`` can tell a flag given from a default; ``SAVED`` says where a run's
config keeps each. No torch: the sweep's defaults are ``sweep.py``'s constants."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..settings.schema import setting
from .sweep import POPGYM_EASY
from .sweep import TORSOS as SWEEP_TORSOS

TORSOS = "gtrxl | trxl_i | transformer_xl | lstm | gru (or any member with XL memory)"
# flag -> where a run's config keeps it: (section, key); "task_params" is data.task_params
SAVED = {"env": ("data", "task"), "member": ("member", None), "seed": ("train", "seed"), "lr": ("train", "lr"),
         "n_envs": ("task_params", "n_envs"), "rollout": ("task_params", "rollout"),
         "epochs": ("task_params", "epochs"), "minibatches": ("task_params", "minibatches"),
         "d_model": ("model", "d_model"), "layers": ("model", "n_layers"), "heads": ("model", "n_heads"),
         "mem_len": ("model", "mem_len"), "gate_bias": ("model", "gate_bias")}


@dataclass
class Run:
    """Rollout, PPO, torso and loop settings shared by `rl train` and `rl sweep` (checked by rl/train.py)."""
    time: str | None = setting(None, flag=True, old=("--time-budget",), metavar="DUR",
                               help="wall-clock budget (per run), e.g. 5m")
    lr: float = setting(5e-4, flag=True)
    n_envs: int = setting(32, flag=True)
    rollout: int = setting(64, flag=True, help="steps per environment per rollout")
    epochs: int = setting(4, flag=True)
    minibatches: int = setting(2, flag=True)
    d_model: int = setting(64, flag=True)
    layers: int = setting(2, flag=True)
    heads: int = setting(4, flag=True)
    mem_len: int = setting(64, flag=True)
    set: list[str] = setting([], flag=True, nargs="*", metavar="KEY=VALUE",
                             help="other rl settings: clip, vf_coef, ent_coef, gamma, lam, eval_episodes")
    ckpt_every: int | None = setting(None, flag=True, metavar="UPDATES",
                                     help="checkpoint every this many PPO updates (default: every 10 rollouts)")
    no_progress: bool = setting(False, flag=True)


DEFAULTS = {f.name: f.default for f in fields(Run) if f.name not in ("time", "set", "ckpt_every", "no_progress")}


@dataclass
class Train:
    """`tfamily rl train`: a run's own flags (None: not given, as ``--resume`` needs to know)."""
    env: str | None = setting(None, flag=True, help="gymnasium id, e.g. popgym-RepeatFirstEasy-v0")
    member: str | None = setting(None, flag=True, help=f"torso: {TORSOS} (default gtrxl)")
    steps: int | None = setting(None, flag=True, help="environment steps (at least one rollout: n_envs x rollout)")
    seed: int | None = setting(None, flag=True, help="default 0")
    out: str | None = setting(None, flag=True, metavar="DIR", help="run directory (default runs/rl/<env>-<member>-s<seed>)")
    resume: str | None = setting(None, flag=True, metavar="DIR",
                                 help="continue the run in DIR exactly (--steps: a new total)")
    gate_bias: float | None = setting(None, flag=True, metavar="B_G",
                                      help="the residual gate's b_g (gtrxl: default 2; 0 is the paper's ablation)")
    json: bool = setting(False, flag=True, help="print the result as JSON")


@dataclass
class Sweep:
    """`tfamily rl sweep`: the runs of a comparison."""
    envs: list[str] = setting(list(POPGYM_EASY), flag=True, metavar="ENV",
                              help="gymnasium ids (default: the five POPGym Easy tasks)")
    members: list[str] = setting(list(SWEEP_TORSOS), flag=True, metavar="TORSO",
                                 help="torsos: a member or MEMBER:gate_bias=X (label MEMBER_bgX)")
    seeds: int = setting(3, flag=True, help="trials per (env, torso): seeds 0..N-1")
    steps: int = setting(None, flag=True, required=True, help="environment steps per run")
    out: str = setting(None, flag=True, required=True, metavar="DIR")
    jobs: int = setting(1, flag=True, help="runs in parallel processes")
    threads: int | None = setting(None, flag=True, help="torch threads per run (default: cores / jobs when --jobs > 1)")
    shard: str | None = setting(None, flag=True, metavar="I/N", help="only every N-th run, from the I-th (0-based)")
    dry_run: bool = setting(False, flag=True, help="list the runs and their status, train nothing")


@dataclass
class Table:
    """`tfamily rl table DIR`."""
    dir: str = setting(None, positional="DIR")
    out: str | None = setting(None, flag=True, metavar="DIR", help="where to write (default: DIR)")
    baselines: str | None = setting(None, flag=True, metavar="JSON",
                                    help="published rows to print beside ours (see rl/table.py)")
    reach: float | None = setting(None, flag=True, metavar="RETURN", check=False,  # rl/table.py names the fix
                                  help="add the env steps until the batch-mean return first reached RETURN")
    json: bool = setting(False, flag=True)


@dataclass
class Eval:
    """`tfamily rl eval RUN`."""
    run: str = setting(None, positional="RUN")
    episodes: int = setting(32, flag=True)
    seed: int | None = setting(None, flag=True, help="evaluation seed (default: the run's)")
    json: bool = setting(False, flag=True)
