"""The arena's grid: members x tasks x seeds, one run directory per cell, resumable and shardable
by the one grid runner (``train/grid.py``).

Cell (task, member, seed) lives in ``OUT/<task>/<member>-s<seed>``: a normal run directory of the
shared loop (``config.yaml``, ``train.csv``, ``checkpoints/``, ``result.json``) plus ``plan.json``
(what the arena asked of it) and, once finished, ``cell.json`` (its leaderboard row). A later run of
the same grid over ``OUT`` skips a cell that has ``cell.json``, resumes one that was killed from its
newest checkpoint (the loop's exact resume), starts over one killed before its first checkpoint, and
refuses a cell planned with other settings; a cell another process holds (``train/grid.py``'s cell
lock, taken before the cell is read or emptied) is skipped, so two runs over ``OUT`` never train one
cell. ``--shard i/n`` runs cells i, i + n, i + 2n, ... of the
grid in its fixed order (tasks, then members, then learning rates, then seeds), so n machines
sharing or merging ``OUT`` cover the grid exactly once. With several ``--lr`` a cell's directory is
``<member>-lr<lr>-s<seed>``; ``NAME:causal`` members live in ``NAME.causal-s<seed>``.
"""
from __future__ import annotations

import contextlib
import difflib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..base.numbers import check_int
from ..train import grid as runner
from ..train.grid import parse_shard  # noqa: F401  (the arena's --shard, as every grid reads it)
from . import ARENA_MEMBERS, tasks  # ARENA_MEMBERS: the default members, defined torch-free
from .settings import STEPS, Arena, task_items
from .files import read_cell

CAUSAL = "causal"  # the one member variant: NAME:causal keeps the decoder's causal pattern


def lr_text(lr: float) -> str:
    """A learning rate as printed and in directory names: ``%g`` (6 digits), or every digit when
    that would print two rates alike (1e-3 and 1.0000001e-3 stay apart)."""
    short = f"{lr:g}"
    return short if float(short) == lr else repr(float(lr))


@dataclass(frozen=True)
class Cell:
    task: str
    member: str           # a member name, or NAME:causal
    seed: int
    lr: float | None = None  # None: the settings' one learning rate

    def dir(self, out: str | Path) -> Path:
        lr = "" if self.lr is None else f"-lr{lr_text(self.lr)}"
        return Path(out) / self.task / f"{self.member.replace(':', '.')}{lr}-s{self.seed}"


@dataclass(frozen=True)
class Settings:
    """What every cell shares (the fairness rules of ``arena/__init__.py``): the plan a cell is continued
    and merged by, made from the command's settings by ``shared``; its defaults are that
    declaration's (a library caller's default budget is 20 steps)."""
    steps: int | None = 20
    time: str | None = None
    lengths: dict = field(default_factory=dict)   # task -> length; missing: the task's declared length
    task_steps: dict = field(default_factory=dict)  # task -> steps; missing: ``steps``
    d_model: int = Arena.d_model
    n_layers: int = Arena.layers
    n_heads: int = Arena.heads
    batch_size: int = Arena.batch_size
    lr: float = 1e-3
    warmup: int | None = None                     # None: a tenth of --steps (20 with --time)
    eval_examples: int = Arena.eval_examples
    match_params: bool = Arena.match_params       # d_ff per member: parameters within 10% of the first's
    threads: int | None = Arena.threads
    flops: float | None = None                    # training FLOPs per (member, seed) (flops.py's rule): stops each cell
    sweep: int = 1                                # learning rates tried: --flops and --time are split evenly among them
    precision: str = Arena.precision
    device: str = Arena.device
    # "attention": every member is gpt's recipe with only its attention changes (pattern, kernel,
    # shared-QK heads, a reversible depth: ``members.Member.attention_only``), LRA's protocol;
    # "papers": each member's full preset (``--as-papers``)
    base: str = "attention"
    ckpt_every: int | None = Arena.ckpt_every     # not part of the plan: it changes no number

    def length(self, task: str) -> int:
        return self.lengths[task] if task in self.lengths else tasks.get(task).length

    def steps_for(self, task: str) -> int | None:
        return self.task_steps.get(task, self.steps)

    def plan(self, cell: Cell, d_ff: int | None = None) -> dict:
        """The settings cell ``cell`` must be continued with; its ``flops`` and ``time`` are the cell's
        share of a sweep's budget (``cell_flops``, ``cell_time``)."""
        keep = {k: v for k, v in asdict(self).items() if k not in ("lengths", "task_steps", "ckpt_every", "sweep")}
        return {**asdict(cell), "length": self.length(cell.task), **keep, "steps": self.steps_for(cell.task),
                "lr": self.lr_of(cell), "d_ff": d_ff, "flops": self.cell_flops, "time": self.cell_time}

    @property
    def cell_flops(self) -> float | None:
        """One cell's FLOPs: the budget over the learning rates of a sweep, so that a member's seed
        spends at most ``flops`` over all its rates."""
        return None if self.flops is None else self.flops / self.sweep

    @property
    def cell_time(self) -> str | float | None:
        """One cell's training time: ``time``, or its share in seconds in a sweep of several rates."""
        if self.time is None or self.sweep == 1:
            return self.time
        from ..base.options import parse_duration
        return parse_duration(self.time, "--time") / self.sweep

    def lr_of(self, cell: Cell) -> float:
        return self.lr if cell.lr is None else cell.lr


def shared(a: Arena) -> Settings:
    """What every cell shares, from the command's settings ``a``."""
    steps = task_items("--steps", a.steps or [], "")
    plain = steps.pop("", None)
    if plain is None and a.time is None and a.flops is None:
        plain = STEPS
    return Settings(steps=plain, time=a.time, lengths=task_items("--length", a.length, ""),
                    task_steps=steps, flops=a.flops, d_model=a.d_model, n_layers=a.layers,
                    n_heads=a.heads, batch_size=a.batch_size, lr=a.lr[0], sweep=len(set(a.lr)),
                    warmup=a.warmup, match_params=a.match_params, eval_examples=a.eval_examples,
                    threads=a.threads, precision=a.precision, device=a.device,
                    ckpt_every=a.ckpt_every, base="papers" if a.as_papers else "attention")


def split_member(label: str) -> tuple[str, bool]:
    """``NAME`` -> (NAME, False): the member's bidirectional encoder (``variants.two_sided``);
    ``NAME:causal`` -> (NAME, True): the member's own causal pattern, read at the last token."""
    name, sep, variant = str(label).partition(":")
    if sep and variant != CAUSAL:
        raise ValueError(f"member {label!r}: the only variant is {name}:{CAUSAL} (the decoder as a classifier); "
                         f"plain {name} is its bidirectional encoder")
    return name, bool(sep)


def check_member(label: str) -> str:
    from ..members import REGISTRY
    name, _ = split_member(label)
    if name not in REGISTRY:
        close = difflib.get_close_matches(str(name), REGISTRY, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown member {name!r}; {hint}see `tfamily members` (arena default: "
                         f"{' '.join(ARENA_MEMBERS)})")
    return label


def grid(members: list[str], task_names: list[str], seeds: int, lrs: list[float] | None = None) -> list[Cell]:
    """Every cell, in the order shards count them: tasks, then members, then learning rates, then
    seeds. One learning rate (or none given) leaves ``Cell.lr`` None: the settings' ``lr``."""
    check_int("--seeds", seeds, 1)
    for name in task_names:
        tasks.check_name(name)
    for name in members:
        check_member(name)
    rates = list(dict.fromkeys(lrs)) if lrs and len(set(lrs)) > 1 else [None]
    return [Cell(t, m, s, lr) for t in dict.fromkeys(task_names) for m in dict.fromkeys(members) for lr in rates
            for s in range(seeds)]


def config(cell: Cell, s: Settings, run_dir: Path, n_classes: int | None, d_ff: int | None = None,
           steps: int | None = None):
    """The shared loop's config of one cell: the member as a classifier (a dual encoder for a task of
    pairs) at the arena's shape, two-sided unless it is ``NAME:causal`` (``variants.two_sided``,
    applied to the member's pattern at the task's length, after its own context rule); for a
    language task (``lm``) the member's own causal decoder. ``steps``: this cell's step budget
    (``--flops``), else the settings'."""
    from ..train import resolve
    from ..train.config import from_dict
    from ..spec.variants import two_sided
    from ..members import REGISTRY
    from ..spec import merge
    member, causal = split_member(cell.member)
    n = tasks.seq_len(cell.task, s.length(cell.task))
    declared = tasks.get(cell.task)
    lm = declared.metric == "bpc"  # a language task: the member's own decoder and objective (causal LM)
    kind = {} if lm else {"model": "dual_encoder" if declared.paired else "classifier",
                          "objective": {"name": "classification", "params": {"n_classes": n_classes}}}
    model = {**kind, "d_model": s.d_model, "depth": {"n_layers": s.n_layers}, "heads": {"n_heads": s.n_heads, "d_head": None},
             "position": {"max_len": n}, **({"ff": {"d_ff": d_ff}} if d_ff else {})}
    if s.base == "attention":  # the member's attention on gpt's recipe; the shape above wins
        model = merge(REGISTRY[member].attention_only(), model)
    steps = s.steps_for(cell.task) if steps is None else steps
    if steps is None and s.time is None:
        steps = 1  # --flops alone: a config only built or counted here; run_cell passes the budget's steps
    warmup = s.warmup if s.warmup is not None else max(1, steps // 10) if steps else 20
    train = {"batch_size": s.batch_size, "max_steps": steps, "time_budget": s.cell_time, "lr": s.lr_of(cell),
             "warmup": warmup,
             "precision": s.precision, "device": s.device, "threads": s.threads, "seed": cell.seed,
             "eval_every": None, "eval_tokens": None, "ckpt_every": s.ckpt_every, "keep": 1, "log_every": 1,
             "out": str(run_dir), "tensorboard": False, "progress": False}
    name = f"{cell.task}-{cell.dir('.').name}"

    def make(model: dict):
        return from_dict({"member": member, "name": name, "size": "small", "model": model,
                          "data": {"corpus": f"arena-{cell.task}"}, "train": train})
    if causal or lm:
        return make(model)
    fitted, _ = resolve.at_context(make(model), resolve.member_dict(make(model)), n)
    return make({**model, "pattern": two_sided(fitted["pattern"], n)})


def params(cell: Cell, s: Settings, vocab_size: int, n_classes: int, d_ff: int | None = None) -> int:
    """The parameter count of the cell's model (built, not trained)."""
    from ..build import build
    from ..train.resolve import make_spec
    spec, _ = make_spec(config(cell, s, Path("."), n_classes, d_ff), vocab_size,
                        tasks.seq_len(cell.task, s.length(cell.task)))
    return sum(p.numel() for p in build(spec).parameters())


def match_d_ff(cells: list[Cell], s: Settings, data_dir=None) -> tuple[dict[tuple[str, str], int | None],
                                                                      dict[tuple[str, str], tuple[float, str]]]:
    """d_ff per (task, member) that brings each member's parameter count closest to the first
    member's at d_ff = 4 d_model (the count is linear in d_ff: two builds fix the line), and for
    each member still more than 10% off (one whose count d_ff does not move, or cannot bring low
    enough) its relative gap and a line saying so (``check_params``). None for every pair when
    ``s.match_params`` is off (each member's own d_ff)."""
    out: dict[tuple[str, str], int | None] = {}
    off: dict[tuple[str, str], tuple[float, str]] = {}
    for task in dict.fromkeys(c.task for c in cells):
        members = list(dict.fromkeys(c.member for c in cells if c.task == task))
        if not s.match_params:
            out.update({(task, m): None for m in members})
            continue
        probe = tasks.make(task, s.length(task), batch_size=1, seed=0, eval_examples=1, data_dir=data_dir)
        count = lambda m, d_ff: params(Cell(task, m, 0), s, probe.vocab_size, probe.n_classes, d_ff)  # noqa: E731
        a, b = 4 * s.d_model, 8 * s.d_model
        target = count(members[0], a)
        for m in members:
            pa, pb = count(m, a), count(m, b)
            out[(task, m)] = d_ff = a if pa == pb else max(1, round(a + (target - pa) * (b - a) / (pb - pa)))
            final = count(m, d_ff)
            if abs(final - target) > 0.1 * target:
                gap = final / target - 1
                off[(task, m)] = gap, (f"{task}: {m} has {final:,} parameters at d_ff {d_ff}, {100 * gap:+.0f}% from "
                                       f"{members[0]}'s {target:,}")
    return out, off


def check_params(off: dict[tuple[str, str], tuple[float, str]], allow: bool) -> None:
    """Refuse members whose parameters d_ff cannot bring within 10% of the first member's (``off``,
    from ``match_d_ff``) unless ``allow``; then their rows carry the gap and every table marks them."""
    if off and not allow:
        raise ValueError(f"{'; '.join(line for _, line in off.values())}: more than 10% apart, so the comparison "
                         f"would not be at a matched size; drop or reorder --members, pass --no-match-params (each "
                         f"member's own d_ff), or --allow-param-mismatch to train them marked † in every table")


def check_cells(cells: list[Cell], s: Settings) -> None:
    """Refuse, before any training, a member the classifier rule cannot build (one line each)."""
    from ..train.resolve import make_spec
    for cell in {(c.task, c.member): c for c in cells}.values():
        try:
            make_spec(config(cell, s, Path("."), 10), 256, tasks.seq_len(cell.task, s.length(cell.task)))
        except ValueError as e:
            how = "its own pattern, read at the last real token" if split_member(cell.member)[1] else \
                "its bidirectional encoder; NAME:causal runs its decoder"
            raise ValueError(f"member {cell.member} cannot be an arena classifier ({how}): {e}") from None


def check_budget(cells: list[Cell], s: Settings, seconds: float, data_dir=None, d_ff: dict | None = None) -> None:
    """Refuse a time budget of ``seconds`` per cell that cannot fit one evaluation of a task's
    validation set by its first member's untrained model, timed here (the loop's time budget
    counts its final validation, and the leaderboard needs it)."""
    import time

    from ..build import build
    from ..train.evaluate import evaluate
    from ..train.resolve import make_spec
    for cell in {c.task: c for c in reversed(cells)}.values():
        task = tasks.make(cell.task, s.length(cell.task), batch_size=s.batch_size, seed=0,
                          eval_examples=s.eval_examples, data_dir=data_dir)
        spec, _ = make_spec(config(cell, s, Path("."), task.n_classes, (d_ff or {}).get((cell.task, cell.member))),
                            task.vocab_size, tasks.seq_len(cell.task, s.length(cell.task)))
        t0 = time.perf_counter()
        evaluate(build(spec), task.val.batches(s.batch_size), device=torch.device("cpu"), precision="fp32")
        took = time.perf_counter() - t0
        if seconds < took:
            share = f" ({seconds:.3g} s for each of {s.sweep} learning rates)" if s.sweep > 1 else ""
            raise ValueError(f"--time {s.time}{share} cannot fit one evaluation of {cell.task}'s {len(task.val)} validation "
                             f"examples ({took:.2g} s for {cell.member} here); give --time of at least "
                             f"{max(1, round(2 * took))}s or fewer --eval-examples")


@contextlib.contextmanager
def peak_memory(device: torch.device):
    """The peak memory of the block, in MiB, in ``box[0]`` on exit: on CUDA the most allocated; on a
    CPU the resident set's high-water mark above its level at the start (``bench/procmem.py``)."""
    box = [None]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        yield box
        box[0] = (torch.cuda.max_memory_allocated(device) - start) / 2**20
        return
    from ..bench import procmem
    procmem.reset_peak()
    start = procmem.rss_mb()
    yield box
    box[0] = max(0.0, procmem._status("VmHWM") - start)


def step_flops(cell: Cell, s: Settings, task, d_ff: int | None = None) -> int:
    """One training step's FLOPs of the cell's model on its task's first batch (``flops.py``'s rule)."""
    from ..build import build
    from ..train.resolve import make_spec
    from . import flops
    spec, _ = make_spec(config(cell, s, Path("."), task.n_classes, d_ff), task.vocab_size,
                        tasks.seq_len(cell.task, s.length(cell.task)))
    return flops.step_flops(build(spec), tasks.first_batch(task))


def flops_steps(cells: list[Cell], s: Settings, data_dir=None, d_ff: dict | None = None) -> dict[tuple[str, str], int]:
    """FLOPs per training step for every (task, member); with ``s.flops`` each cell's steps are
    the budget over that (capped by ``s.steps``). A budget that cannot pay for one step of some
    member is refused in one line, before any training."""
    out = {}
    for cell in {(c.task, c.member): c for c in cells}.values():
        task = tasks.make(cell.task, s.length(cell.task), batch_size=s.batch_size, seed=0, eval_examples=1,
                          data_dir=data_dir)
        per_step = out[(cell.task, cell.member)] = step_flops(cell, s, task, (d_ff or {}).get((cell.task, cell.member)))
        if s.flops is not None and s.cell_flops < per_step:
            share = f" ({s.flops:.3g} over {s.sweep} learning rates)" if s.sweep > 1 else ""
            raise ValueError(f"--flops {s.cell_flops:.3g}{share} cannot pay for one training step of {cell.member} "
                             f"on {cell.task} ({per_step:.3g} FLOPs at batch {s.batch_size}, length "
                             f"{s.length(cell.task)}); give --flops of at least {s.sweep * per_step:.2g}")
    return out


def steps_of(s: Settings, task: str, per_step: int) -> int | None:
    """A cell's step budget: its task's steps, or under ``--flops`` the steps its share of the budget
    pays for (``Settings.cell_flops``; capped by the task's steps when given)."""
    steps = s.steps_for(task)
    if s.flops is None:
        return steps
    paid = int(s.cell_flops // per_step)
    return paid if steps is None else min(paid, steps)


def run_cell(cell: Cell, s: Settings, out: str | Path, data_dir=None, d_ff: int | None = None,
             per_step: int | None = None, params_off: float | None = None) -> tuple[dict | None, str]:
    """Train one cell (or skip or resume it) with ``d_ff`` (``match_d_ff``; None: the member's own);
    its row and what happened: skipped, ran, resumed; or (None, the holder) when another process
    holds the cell (``train/grid.py``'s cell lock: it is never trained twice). ``per_step``: its FLOPs
    per training step (``flops_steps``; None: counted here). ``params_off``: the relative gap of its
    parameter count to the first member's, when allowed past 10% (``check_params``)."""
    from ..train.rundir import RunDirLocked
    d = cell.dir(out)
    try:
        held = runner.cell_lock(d)
    except RunDirLocked as e:
        return None, e.holder
    with held:
        return _run_locked(cell, s, d, data_dir, d_ff, per_step, params_off)


def _run_locked(cell: Cell, s: Settings, d: Path, data_dir, d_ff: int | None, per_step: int | None,
                params_off: float | None) -> tuple[dict, str]:
    from ..train.evaluate import evaluate
    from ..train.loop import Trainer
    plan = s.plan(cell, d_ff)
    kind, _ = runner.status(d, plan, lambda d: (d / "cell.json").exists())
    if kind == "done":
        return read_cell(d / "cell.json"), "skipped"
    runner.start(d, plan, kind)
    resume = d if kind == "resume" else None
    task = tasks.make(cell.task, s.length(cell.task), batch_size=s.batch_size, seed=cell.seed,
                      eval_examples=s.eval_examples, data_dir=data_dir)
    per_step = step_flops(cell, s, task, d_ff) if per_step is None else per_step
    cfg = config(cell, s, d, task.n_classes, d_ff, steps_of(s, cell.task, per_step))
    trainer = Trainer(cfg, task=task, resume=resume, data_dir=data_dir)
    try:
        with peak_memory(trainer.device) as peak:  # training only: the imports of a process's first cell stay out
            result = trainer.fit()
        test = evaluate(trainer.model, task.test.batches(s.batch_size), device=trainer.device,
                        precision=trainer.precision, metrics=task.eval_metrics)
    finally:
        trainer.close()
    lm = tasks.metric(cell.task) == "bpc"
    row = {**asdict(cell), "lr": s.lr_of(cell), "d_ff": trainer.spec.ff.d_ff or 4 * trainer.spec.d_model,
           "length": s.length(cell.task), "params": result["params"], "params_off": params_off,
           "majority_acc": tasks.majority(task), "steps": result["steps"],
           "metric": tasks.metric(cell.task), "test_acc": None if lm else test["acc"],
           "val_acc": None if lm else result["val_acc"], "test_bpc": test["bpc"] if lm else None,
           "val_bpc": result["val_bpc"] if lm else None, "flops_per_step": per_step,
           "train_flops": per_step * result["steps"], "val_loss": result["val_loss"],
           "train_loss": result["train_loss"], "train_s": trainer.elapsed,
           "tokens_per_s": result["tokens_per_s"], "peak_mb": peak[0], "stopped": result["stopped"],
           "resumed": resume is not None, "precision": result["precision"], "threads": result["threads"],
           "device": result["device"], "base": s.base}
    runner.write_json(d / "cell.json", row)
    return row, "resumed" if resume is not None else "ran"
