"""`tfamily rl sweep`: every (environment, torso, seed) run of a comparison, resumable.

The issue-15 comparison is a grid: POPGym tasks x torsos x seeds at equal environment
steps, plus the paper's b_g ablation (Parisotto et al. 2019, section 3.2: GRU gate with
b_g = 0 against the default 2). A torso is named by a *label*: a member (``gtrxl``,
``lstm``, ...) or a member with its gate bias, ``gtrxl:gate_bias=0`` (label ``gtrxl_bg0``).
Run (env, label, seed) lives in ``OUT/<env>/<label>-s<seed>`` with a ``plan.json`` that
records what the sweep asked of it. The runs are cells of the one grid runner
(``train/grid.py``, as the arena's): a later sweep over the same directory skips a finished
run (its ``result.json`` reached the planned update count), resumes a killed one from its
newest checkpoint (the loop's bitwise resume) and refuses a run planned with other
settings; ``--shard i/n`` takes every n-th run (several machines sharing ``OUT``). A larger
``--steps`` continues finished runs to the new total (``steps`` may change between sweeps).
``--jobs`` runs several in parallel processes. ``table.py`` turns ``OUT`` into the MMER table
and the curves.
"""
from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

from ..base.textload import read_json, require
from ..train import grid as runner
from ..base.numbers import check_int

# Morad et al. 2023's memory tasks at the Easy level (PAPERS.md: the stateless CartPole is
# registered as PositionOnlyCartPole).
POPGYM_EASY = ("popgym-RepeatPreviousEasy-v0", "popgym-RepeatFirstEasy-v0", "popgym-CountRecallEasy-v0",
               "popgym-AutoencodeEasy-v0", "popgym-PositionOnlyCartPoleEasy-v0")
TORSOS = ("gtrxl", "trxl_i", "transformer_xl", "lstm", "gru", "gtrxl:gate_bias=0")


@dataclass(frozen=True)
class Torso:
    """A sweep column: a member, optionally with its residual gate's b_g."""
    label: str
    member: str
    gate_bias: float | None = None


def parse_torso(text: str) -> Torso:
    """``member`` or ``member:gate_bias=X`` (label ``member_bgX``)."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"--members entry {text!r} is empty; e.g. gtrxl or gtrxl:gate_bias=0")
    member, sep, option = text.partition(":")
    if not sep:
        return Torso(member, member)
    key, eq, value = option.partition("=")
    if key != "gate_bias" or not eq:
        raise ValueError(f"--members entry {text!r}: the only option is gate_bias=X, e.g. gtrxl:gate_bias=0")
    try:
        bias = float(value)
    except ValueError:
        raise ValueError(f"--members entry {text!r}: gate_bias {value!r} is not a number") from None
    if not math.isfinite(bias):
        raise ValueError(f"--members entry {text!r}: gate_bias must be finite")
    return Torso(f"{member}_bg{bias:g}", member, bias)


@dataclass(frozen=True)
class RunPlan:
    env: str
    torso: Torso
    seed: int
    steps: int                  # environment steps asked for (rounded up to whole rollouts by rl_config)
    settings: dict              # rollout / PPO settings (rl_config's ``settings``)
    model: dict                 # torso sizes (rl_config's ``torso``, without gate_bias)
    lr: float
    ckpt_every: int | None
    out: str

    @property
    def dir(self) -> Path:
        return Path(self.out) / self.env.replace("/", "_") / f"{self.torso.label}-s{self.seed}"

    def record(self) -> dict:
        """What must match between sweeps for a run to be continued (``steps`` may grow)."""
        return {"env": self.env, **asdict(self.torso), "seed": self.seed, "settings": self.settings,
                "model": self.model, "lr": self.lr}

    def config(self, progress: bool, time_budget=None):
        from .train import rl_config
        torso = {**self.model, **({} if self.torso.gate_bias is None else {"gate_bias": self.torso.gate_bias})}
        return rl_config(self.env, self.torso.member, self.steps, seed=self.seed, out=str(self.dir), lr=self.lr,
                         time_budget=time_budget, torso=torso, settings=self.settings, progress=progress,
                         ckpt_every=self.ckpt_every)


def plan(envs, members, seeds: int, steps: int, out: str | Path, *, settings: dict | None = None,
         model: dict | None = None, lr: float = 5e-4, ckpt_every: int | None = None,
         shard: str | None = None) -> list[RunPlan]:
    """The runs, seed-major (every torso of seed 0 first, so a cut-short sweep is still a
    like-for-like comparison); each (env, torso) builds its policy once here, so a bad one is
    refused before any run trains."""
    envs, torsos = list(envs), [parse_torso(m) for m in members]
    if not envs or not torsos:
        raise ValueError("a sweep needs at least one --envs id and one --members torso")
    labels = [t.label for t in torsos]
    if len(set(labels)) != len(labels) or len(set(envs)) != len(envs):
        raise ValueError(f"--envs {envs} / --members labels {labels} repeat an entry; name each once")
    check_int("--seeds", seeds, 1, hint="seeds 0..N-1")
    runs = [RunPlan(e, t, s, steps, dict(settings or {}), dict(model or {}), lr, ckpt_every, str(out))
            for s in range(seeds) for e in envs for t in torsos]
    from .train import make_policy
    for r in runs[: len(envs) * len(torsos)]:
        make_policy(r.config(progress=False))
    return _shard(runs, shard)


def _shard(runs: list[RunPlan], shard: str | None) -> list[RunPlan]:
    return runner.shard(runs, shard)


def status(run: RunPlan) -> tuple[str, int | None]:
    """``("done", step)``, ``("resume", step)`` (newest complete checkpoint) or ``("new", None)``;
    refuses a run directory planned with other settings (``train/grid.py``)."""
    target = run.config(progress=False).train.max_steps
    result = run.dir / "result.json"

    def steps_done(d: Path) -> int:
        return require(read_json(result), "steps", int, str(result)) if result.is_file() else -1
    kind, step = runner.status(run.dir, {**run.record(), "steps": run.steps}, lambda d: steps_done(d) >= target,
                               may_change=("steps",))
    return (kind, steps_done(run.dir)) if kind == "done" else (kind, step)


def execute(run: RunPlan, *, progress: bool = True, time_budget=None, threads: int | None = None) -> dict:
    """Train one run to its planned end (fresh or from its checkpoint); its result."""
    from .train import train
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    kind, _ = status(run)
    _write_plan(run)
    if kind == "done":
        return read_json(run.dir / "result.json")
    cfg = run.config(progress, time_budget)
    if kind == "resume":
        overrides = {"train.max_steps": cfg.train.max_steps, "train.progress": progress,
                     "train.time_budget": time_budget}
        return train(resume=run.dir, overrides=overrides)
    return train(cfg)


def _write_plan(run: RunPlan) -> None:
    """plan.json: the settings and the steps the latest sweep asked of this run (``table.py``
    counts a run finished once its result reaches them)."""
    runner.write_plan(run.dir, {**run.record(), "steps": run.steps})


def _line(i: int, n: int, run: RunPlan, what: str) -> str:
    return f"[{i}/{n}] {run.env} {run.torso.label} s{run.seed}: {what}"


def sweep(runs: list[RunPlan], *, jobs: int = 1, progress: bool = True, time_budget=None,
          threads: int | None = None, log=print) -> list[dict]:
    """Run every planned run (skipping finished ones), one line of progress per run. A run that
    fails with a ValueError/TypeError/OSError (a checkpoint that no longer fits the code, a full
    disk) is reported and the sweep goes on; the failures are raised together at the end."""
    check_int("--jobs", jobs, 1)
    n, todo, out = len(runs), [], []
    for i, run in enumerate(runs, 1):
        kind, step = status(run)
        if kind == "done":
            _write_plan(run)
            log(_line(i, n, run, f"done at update {step}, skipped"))
            out.append({"run": str(run.dir), "status": "skipped"})
        else:
            todo.append((i, run, kind, step))
    failed: list[str] = []
    if jobs == 1:
        for i, run, kind, step in todo:
            log(_line(i, n, run, f"resuming from update {step}" if kind == "resume" else "training"))
            try:
                out.append(_finish(i, n, run, execute(run, progress=progress, time_budget=time_budget,
                                                      threads=threads), log))
            except (ValueError, TypeError, OSError) as e:
                failed.append(_failed(i, n, run, e, log))
        return _raise_failures(out, failed, n)
    # spawn: a fresh interpreter per worker (no forked torch thread pools); bars would interleave
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = []
        for i, run, kind, step in todo:
            log(_line(i, n, run, f"queued ({'resume from update ' + str(step) if kind == 'resume' else 'new'})"))
            futures.append((i, run, pool.submit(execute, run, progress=False, time_budget=time_budget,
                                                threads=threads or max(1, (os.cpu_count() or 1) // jobs))))
        for i, run, fut in futures:
            try:
                out.append(_finish(i, n, run, fut.result(), log))
            except (ValueError, TypeError, OSError) as e:
                failed.append(_failed(i, n, run, e, log))
    return _raise_failures(out, failed, n)


def _failed(i: int, n: int, run: RunPlan, error: Exception, log) -> str:
    line = _line(i, n, run, f"failed: {type(error).__name__}: {error}")
    log(line)
    return line


def _raise_failures(out: list[dict], failed: list[str], n: int) -> list[dict]:
    if failed:
        raise ValueError(f"{len(failed)} of {n} runs failed (the others finished or were skipped): "
                         + " | ".join(failed))
    return out


def _finish(i: int, n: int, run: RunPlan, result: dict, log) -> dict:
    ret = result.get("train_mean_return")
    log(_line(i, n, run, f"{result['tokens']} env steps at {result['tokens_per_s']:.0f}/s, batch-mean return "
                         f"{'n/a' if ret is None else f'{ret:.3f}'}, eval {result.get('val_return')}"))
    return {"run": str(run.dir), "status": result.get("stopped", "max_steps"), "result": result}


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
