"""``tfamily rl``: build a PPO run as a ``Config`` and drive it with the shared ``Trainer``.

The run's config is an ordinary training config, so checkpoints, resume, budgets and
logs work unchanged: ``member`` names the torso (a family member with XL memory, or
``lstm`` / ``gru``), ``model`` its sizes, ``data.task`` the environment id and
``data.task_params`` the rollout and PPO settings; ``train.max_steps`` is the number of
PPO minibatch updates that ``--steps`` environment steps make.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, fields
from pathlib import Path

from ..base.numbers import check_int, check_number
from ..spec.sizes import fmt_bytes, machine_memory
from ..train import checkpoint
from ..settings.run import MAX_SEED, Config, DataConfig, TrainConfig, validate
from ..train.loop import Trainer
from ..train.fit import resume_config
from ..train.rng import seed_all
from .encoders import encoder_for
from .envs import check_env
from .policy import ActorCritic
from .ppo import PPOSettings
from .task import RolloutSettings, RolloutTask, episodes
from .torso import build_torso

TORSO_KEYS = ("d_model", "n_layers", "n_heads", "mem_len", "gate_bias")  # gate_bias: optional (gated torsos)
TORSO_DEFAULTS = {"d_model": 64, "n_layers": 2, "n_heads": 4, "mem_len": 64}


def _split(params: dict) -> tuple[RolloutSettings, PPOSettings]:
    names = {f.name for f in fields(RolloutSettings)} | {f.name for f in fields(PPOSettings)}
    bad = sorted(set(params) - names)
    if bad:
        raise ValueError(f"unknown rl setting(s) {bad}; valid: {', '.join(sorted(names))}")
    pick = lambda cls: {k: v for k, v in params.items() if k in {f.name for f in fields(cls)}}  # noqa: E731
    return RolloutSettings(**pick(RolloutSettings)), PPOSettings(**pick(PPOSettings))


def rl_config(env: str, member: str, steps: int, *, seed: int = 0, out: str | None = None, lr: float = 5e-4,
              time_budget=None, torso: dict | None = None, settings: dict | None = None,
              progress: bool = True, tensorboard: bool = True, ckpt_every: int | None = None) -> Config:
    """The run that trains ``member`` on ``env`` for ``steps`` environment steps (rounded up to
    whole rollouts); ``ckpt_every``: PPO updates between checkpoints (default 10 rollouts)."""
    rollout, ppo = _split(settings or {})
    model = {**TORSO_DEFAULTS, **(torso or {})}
    bad = sorted(set(model) - set(TORSO_KEYS))
    if bad:
        raise ValueError(f"unknown torso setting(s) {bad}; valid: {', '.join(TORSO_KEYS)}")
    check_sizes(member, model, rollout)
    check_number("--lr", lr, 0.0, lo_open=True)
    check_int("--ckpt-every", ckpt_every, 1, none=True,
              hint="PPO updates between checkpoints; leave it out to checkpoint every 10 rollouts")
    check_int("--seed", seed, 0, MAX_SEED)
    check_int("--steps", steps, None)  # its lower bound is one rollout, named below
    if steps < rollout.steps:
        raise ValueError(f"--steps {steps!r} is fewer than one rollout: n_envs x rollout = {rollout.n_envs} x "
                         f"{rollout.rollout} = {rollout.steps} environment steps; use --steps >= {rollout.steps}")
    updates = ppo.epochs * ppo.minibatches
    name = f"{env}-{member}-s{seed}".replace("/", "_")
    train = TrainConfig(batch_size=rollout.n_envs, max_steps=math.ceil(steps / rollout.steps) * updates,
                        time_budget=time_budget, lr=lr, min_lr_ratio=1.0, warmup=0, weight_decay=0.0,
                        betas=(0.9, 0.999), eps=1e-5, grad_clip=0.5, precision="fp32", seed=seed,
                        eval_every=None, eval_tokens=None, log_every=1, ckpt_every=ckpt_every or 10 * updates,
                        keep=2, out=out or f"runs/rl/{name}", tensorboard=tensorboard, progress=progress)
    cfg = Config(member=member, name=name, model=model,
                 data=DataConfig(corpus=None, task=env, task_params={**asdict(rollout), **asdict(ppo)}),
                 train=train)
    validate(cfg)
    return cfg


_TORSO_FLAGS = (("d_model", "--d-model", 1), ("n_layers", "--layers", 1), ("n_heads", "--heads", 1),
                ("mem_len", "--mem-len", 0))
ENV_BYTES = 4 << 10  # a gymnasium environment object, at least


def check_sizes(member: str, model: dict, rollout: RolloutSettings) -> None:
    """Refuse torso sizes that are not positive integers, and a policy whose lower-bound memory
    (fp32 weights, gradients and AdamW moments; a rollout's activations and memories; the
    environments) exceeds the machine's, before anything is allocated."""
    for key, flag, lo in _TORSO_FLAGS:
        check_int(f"{flag} ({key})", model.get(key), lo)
    d, n = model["d_model"], model["n_layers"]
    gates = {"lstm": 4, "gru": 3}.get(member)
    # per layer: a recurrent cell's input and recurrent d x d matrices per gate, or attention's
    # four d x d projections and the 4d feed-forward's two matrices
    params = n * (gates * 2 * d * d if gates else 12 * d * d)
    memory = 0 if gates else rollout.n_envs * model["mem_len"] * d * n
    acts = rollout.steps * d * (n + 4) + memory
    need = 4 * (4 * params + acts) + rollout.n_envs * ENV_BYTES
    have, what = machine_memory()
    if need > have:
        raise ValueError(f"this policy cannot fit: it needs at least {fmt_bytes(need)} ({params:.3g} torso "
                         f"parameters with gradients and AdamW moments, activations of n_envs x rollout = "
                         f"{rollout.n_envs} x {rollout.rollout} steps) but the machine has {what}; lower some of "
                         f"--d-model={d}, --layers={n}, --n-envs={rollout.n_envs}, --rollout={rollout.rollout}"
                         + ("" if gates else f", --mem-len={model['mem_len']}"))


def make_policy(cfg: Config) -> tuple[ActorCritic, RolloutSettings]:
    """The actor-critic a run's config describes (weights freshly initialised)."""
    rollout, ppo = _split(cfg.data.task_params)
    env = check_env(cfg.data.task)
    try:
        m = {**TORSO_DEFAULTS, **cfg.model}
        check_sizes(cfg.member, m, rollout)
        torso = build_torso(cfg.member, **{k: m[k] for k in TORSO_KEYS if k in m})
        policy = ActorCritic(encoder_for(env.observation_space, torso.d_model), torso, int(env.action_space.n), ppo)
    finally:
        env.close()
    return policy, rollout


def trainer(cfg: Config, resume: str | Path | None = None) -> Trainer:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("tfamily rl trains in one process (every rank would play the same episodes); "
                         "run it without torchrun")
    seed_all(cfg.train.seed)  # the policy's initial weights depend on the seed only
    policy, rollout = make_policy(cfg)
    task = RolloutTask(cfg.data.task, policy, rollout, seed=cfg.train.seed)
    return Trainer(cfg, task=task, model=policy, resume=resume)


def train(cfg: Config | None = None, *, resume: str | Path | None = None, overrides: dict | None = None) -> dict:
    """Train ``cfg``, or continue the run at ``resume`` (with dotted ``overrides``)."""
    if resume is not None:
        ck = checkpoint.load(resume)
        check_rl_run(ck)
        check_resume(ck.meta, overrides or {})
        cfg = resume_config(resume, overrides)
    tr = trainer(cfg, resume)
    try:
        result = tr.fit()
    finally:
        tr.task.close()
        tr.close()
    return result


def check_resume(meta: dict, overrides: dict) -> None:
    """Refuse to resume a run with nothing left to train (its --steps, or the new one, not past
    the checkpoint: the loop would only evaluate again and append a duplicate row)."""
    from ..train.config import check_resume as check_budget
    saved = meta["config"]["train"]
    target = overrides.get("train.max_steps", saved.get("max_steps"))
    if isinstance(target, int) and not isinstance(target, bool) and target <= meta["step"]:
        params = meta["config"]["data"]["task_params"]
        per_rollout = params["n_envs"] * params["rollout"]
        done = meta["tokens"]
        given = "--steps" if "train.max_steps" in overrides else "its --steps"
        raise ValueError(f"the checkpoint is at {done} environment steps (PPO update {meta['step']}) and {given} "
                         f"reaches no further ({target * per_rollout // (params['epochs'] * params['minibatches'])}"
                         f"): nothing to train; pass --steps N with N > {done} to train longer (or `tfamily rl "
                         f"eval` to score it)")
    check_budget(meta, {k: v for k, v in overrides.items() if k in ("train.max_steps", "train.time_budget")})


def check_rl_run(ck: checkpoint.Loaded) -> None:
    """Refuse a checkpoint that `tfamily rl train` did not write (a language model's, say)."""
    params = ((ck.meta.get("config") or {}).get("data") or {}).get("task_params") or {}
    if not {"n_envs", "rollout", "epochs", "minibatches"} <= set(params):
        raise ValueError(f"{ck.path} is not a run of `tfamily rl train` (its config has no rollout settings); "
                         f"a language model's run is read by `tfamily eval` and continued by `tfamily train --resume`")


def evaluate_run(run: str | Path, episodes_: int, *, seed: int | None = None) -> dict:
    """Mean return of ``episodes_`` evaluation episodes of the run's last checkpoint."""
    if isinstance(episodes_, bool) or not isinstance(episodes_, int) or episodes_ < 1:
        raise ValueError(f"--episodes must be an integer >= 1, got {episodes_!r}")
    if seed is not None and seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed}; leave it out for the run's own seed")
    ck = checkpoint.load(run)
    check_rl_run(ck)
    cfg = resume_config(run)
    seed_all(cfg.train.seed)
    policy, rollout = make_policy(cfg)
    ck.load_weights(policy)
    policy.eval()
    returns, lengths = [], []
    for _, _, finished in episodes(policy, cfg.data.task, n_envs=rollout.n_envs, steps=rollout.rollout,
                                   seed=cfg.train.seed if seed is None else seed, count=episodes_,
                                   max_steps=10**7):
        returns.extend(r for r, _ in finished)
        lengths.extend(n for _, n in finished)
    returns, lengths = returns[:episodes_], lengths[:episodes_]
    return {"run": str(ck.path.parent.parent), "env": cfg.data.task, "member": cfg.member, "step": ck.meta["step"],
            "env_steps": ck.meta["tokens"], "episodes": len(returns), "mean_return": statistics.fmean(returns),
            "std_return": statistics.pstdev(returns), "mean_length": statistics.fmean(lengths)}


def print_json(obj) -> None:
    print(json.dumps(obj, indent=1))
