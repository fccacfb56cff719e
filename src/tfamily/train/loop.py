"""The training loop: one ``Trainer`` driving a ``Task`` on CPU, CUDA and torchrun.

Each step: ``accum`` micro-batches from the task through ``model.loss`` under autocast,
one backward each (DDP or FSDP syncs gradients on the last; in fp16 the loss is scaled first,
``device.grad_scaler``), clip the global gradient norm, AdamW step (in fp16 skipped when
the scaled gradients overflowed), scheduler step, ``model.after_step()`` when the model
has one. Every step's mean loss is checked before the optimiser touches the weights, so a
non-finite loss stops the run with the weights and the last checkpoint unchanged.

The loop runs steps; whatever a run does between them is a callback (``callbacks/``: time budget,
non-finite guard, logging, start line, evaluation, checkpointing, result file, then the caller's
own), handed each step as a ``StepRecord``. The other parts (task, start-up, budget, snapshot,
carried state) each have a module; docs/architecture.md, "Training", maps them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections import deque
from pathlib import Path

import torch
from torch import Tensor, nn

from ..build import build
from ..models.hooks import AfterStep, SeesProgress
from ..spec.sizes import check_fits
from ..spec import Spec
from . import assemble, checkpoint, distributed, finetune, guard, resolve, rundir, snapshot, startup
from .budget import Budget, Curve
from .callbacks import (Callbacks, Checkpointing, Clock, Evaluation, MeasuredLine, NonFiniteGuard, Progress,
                        ResultFile, StepRecord, TimeBudget, extra)
from .config import Config, dump, parse_duration
from .device import autocast, grad_scaler, resolve_precision
from .evaluate import carried_state, held_out, to_device
from .guard import NonFiniteLoss  # raised here, caught by the commands as loop.NonFiniteLoss
from .metrics import Logger
from .optim import make_optimizer, warmup_cosine
from .rng import seed_all
from .task import Reports, Task


class Trainer:
    def __init__(self, cfg: Config, *, data_dir=None, resume: str | Path | None = None, task: Task | None = None,
                 spec: Spec | None = None, model: nn.Module | None = None, callbacks=()):
        """``resume``: a run or checkpoint directory to continue; ``cfg`` should then be the
        checkpoint's config (``fit.resume_config``), and the spec must match it.
        ``task``: the work (default: the one ``cfg.data`` names); ``spec``: the model (default:
        ``cfg.member`` with ``cfg.model``, sized to the task); ``model``: an already built model
        with ``loss(batch)`` (a model outside the family, e.g. in a test), instead of a spec. The member
        decides what the config leaves open (``resolve.py``): ``data.stream`` and sizes fitted to the context.
        ``callbacks``: called after the run's own (``callbacks/base.py``: the hooks), then those
        ``callbacks.installed`` adds."""
        t = cfg.train
        self.callbacks = Callbacks([*callbacks, *extra()])
        self.dist = d = distributed.setup(t.device, t.parallel)
        if t.batch_size % d.world_size:
            raise ValueError(f"train.batch_size={t.batch_size} is the global batch and must divide evenly "
                             f"over {d.world_size} ranks; use a multiple of {d.world_size}")
        # The run directory's lock comes first, before anything reads or writes it (rundir.py).
        self.run_dir = Path(checkpoint.resolve(resume).parent.parent if resume is not None else
                            cfg.train.out or f"runs/train/{cfg.run_name}")
        self._lock = rundir.RunLock(self.run_dir) if d.main else None
        try:
            self._setup(cfg, data_dir, resume, task, spec, model)
        except BaseException:
            self._release()
            raise

    # -- set-up ------------------------------------------------------------------------------
    def _setup(self, cfg: Config, data_dir, resume, task: Task | None, spec: Spec | None, model: nn.Module | None):
        t, d = cfg.train, self.dist
        if resume is None and distributed.any_rank(
                d.main and bool(checkpoint.step_dirs(self.run_dir / "checkpoints")), d):
            raise ValueError(f"run directory {self.run_dir} already has checkpoints; continue it with "
                             f"--resume {self.run_dir} or pick another train.out")
        self.ckpt = checkpoint.load(resume) if resume is not None else None
        meta = self.ckpt.meta if self.ckpt is not None else {}
        if isinstance(t.threads, int):
            torch.set_num_threads(t.threads)
        elif t.threads in ("auto", "machine") and isinstance(meta.get("threads"), int):
            torch.set_num_threads(meta["threads"])  # resume as it ran (bitwise)
        self.device, self.precision = d.device, resolve_precision(t.precision, d.device)
        if data_dir is None and self.ckpt is not None:
            data_dir = meta.get("data_dir")  # a resumed run reads the data it ran on
        self.data_dir = str(Path(data_dir).expanduser().resolve()) if data_dir is not None else None
        seed_all(t.seed)
        self.notes: list[str] = []  # one line each, printed at start (resolve.py)
        self.callbacks.on_stage("data")
        self.cfg, self.task = (cfg, task) if task is not None else assemble.task_for(
            cfg, d, data_dir, spec, model, finetune.vocab(cfg, self.ckpt), self.notes)
        self.callbacks.on_stage("build")
        self.spec, model = self._build(spec, model)
        self.model = distributed.shard(model.to(self.device), d)  # FSDP: before the optimiser sees them
        self.params = sum(p.numel() for p in self.model.parameters())
        self.budget = Budget(parse_duration(t.time_budget, "train.time_budget"), t.max_steps,
                             self.task.eval_size(t.eval_tokens))
        self.curve = Curve(t.eval_every, t.log_every, self.budget.eval_units,
                           (t.eval_batch_size or t.batch_size) * self.task.seq_len)
        self.clock = Clock(meta.get("step", 0), 0, meta.get("elapsed", 0.0))
        self.compile_s: float | None = None  # with train.compile: the first step's seconds, compilation included
        if self.ckpt is not None and t.precision in ("auto", "machine"):
            self.precision = meta.get("precision", self.precision)  # resume as it ran
        self.callbacks.on_stage("autotune")
        self._start = startup.Start(t, self.cfg.member, self.cfg.size, self.spec, self.model, self.params, self.task,
                                    self.device, d, self.ckpt.meta if self.ckpt is not None else None, self.notes,
                                    t.batch_size * t.accum * self.task.seq_len)
        self.units_per_step = self._start.units_per_step
        self._autotune(*startup.to_time(self._start, self.precision))  # before the optimiser (its import takes s)
        if d.main:  # the start line, then what the member decided (resolve.py)
            line = startup.first_line(self._start, self.precision, self.speed_from, self.step_s,
                                      self._to_end(self.step_s))
            print("\n".join([line, *(f"note: {n}" for n in self.notes)]), file=sys.stderr, flush=True)
        self._optimise(t, d)

    def _build(self, spec: Spec | None, model: nn.Module | None) -> tuple[Spec | None, nn.Module]:
        """The spec (the member's, sized to the task, unless given) and its model; or a model given ready-made."""
        if model is not None:
            return None, model
        cfg, task, t = self.cfg, self.task, self.cfg.train
        if spec is None:
            spec, note = resolve.make_spec(cfg, task.vocab_size, task.seq_len,
                                           task.n_classes if task.kind == "classification" else None)
            self.notes += [note] if note else []
        # Refuse sizes the machine cannot hold before allocating any of them.
        check_fits(spec, batch=t.batch_size // self.dist.world_size, seq_len=task.seq_len, training=True,
                   device=self.device)
        self.notes += [n for n in [resolve.dense_note(spec, task.seq_len)] if n]
        return spec, finetune.prepare(build(spec), cfg, self.ckpt is None, self.notes)  # init_from, LoRA

    def _optimise(self, t, d: distributed.Dist) -> None:
        """The optimiser, schedule, loss scaler, carried state and checks; a resumed run's state restored."""
        self.optimizer = make_optimizer(t.optimizer, self.model, t.lr, t.weight_decay, t.betas, t.eps, t.fused)
        self.scheduler = warmup_cosine(self.optimizer, t.warmup, t.max_steps or t.warmup + 10**6, t.min_lr_ratio)
        self.recent: deque = deque(maxlen=50)  # the last losses; train_loss is their mean (checkpointed)
        self.state = carried_state(self.model, self.task.carries_state)
        if d.active:  # distinct dropout noise per rank (the weights are identical: same seed)
            torch.manual_seed(t.seed + 1000003 * d.rank)
        self.parts = snapshot.Parts(self.model, self.optimizer, self.scheduler, self.task, self.state, d, self.device)
        if self.ckpt is not None:
            ran = snapshot.restore(self.parts, self.ckpt, self.spec)
            self.clock.step, self.clock.tokens, self.clock.elapsed = ran["step"], ran["tokens"], ran["elapsed"]
            self.recent.extend(ran["recent"])
            if self.budget.seconds is None and t.max_steps:
                # A run resumed with a new --steps stretches (or shortens) its cosine to it.
                self._set_total(t.max_steps)
        # fp16 only, which the autotune (bf16 against fp32) never picks.
        self.scaler = grad_scaler(self.device, self.precision)
        self.skipped = snapshot.restore_scaler(self.scaler, self.ckpt.meta) if self.ckpt is not None else 0
        self.check_every = guard.check_every(t.check_every, t.log_every, self.device, scaled=self.scaler.is_enabled(),
                                             ranks=d.active, optimizer=self.optimizer)
        self.guard = guard.Guard(self.device) if self.check_every > 1 else None
        self.loss_module = distributed.LossOf(self.model)
        self.loss_fn = distributed.wrap(self.loss_module, d)
        if t.compile:
            self.loss_fn = torch.compile(self.loss_fn)
        self.last_ckpt: Path | None = self.ckpt.path if self.ckpt is not None else None
        self.saved_step = self.step if self.ckpt is not None else None  # known on every rank
        self.evals: list[dict] = []  # this session's evaluations, in order

    def close(self, sync: bool = True) -> None:
        """Leave the process group (see ``distributed.teardown``), dropping the DDP wrapper
        first, and release the run directory; ``sync=False`` after an error, when a peer may be gone."""
        self.loss_fn = None
        self._release()
        distributed.teardown(self.dist, sync)

    def _release(self) -> None:
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.release()

    def _autotune(self, threads: bool, precision: bool) -> None:
        choice, self.speed_from = startup.tune(self._start, self.precision, threads, precision, self._measure)
        self.precision, self.step_s = choice.precision, choice.step_s
        self.thread_rates, self.precision_rates = choice.thread_rates, choice.precision_rates

    def _measure(self, settings: list[tuple[int, str]], budget_s: float | None = None) -> dict:
        return startup.measure(self._start, settings, budget_s)

    def _to_end(self, step_s: float) -> str:
        t = self.cfg.train
        return startup.to_end(step_s, self.step, t.max_steps, self.budget.seconds, self.elapsed, t.time_budget)

    # -- the run's state ---------------------------------------------------------------------
    step = Clock.attribute("step", "Steps taken (a resumed run's included).")
    tokens = Clock.attribute("tokens", "Units trained on, in the task's unit.")
    elapsed = Clock.attribute("elapsed", "The run's clock: training, evaluations and checkpoints.")
    train_s = Clock.attribute("train_s", "This session's training seconds.")

    @property
    def train_loss(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    @property
    def last_eval(self) -> dict | None:
        return self.evals[-1] if self.evals else None

    @property
    def progress(self) -> float:
        """Steps taken over the planned total: ``max_steps``, or for a time budget the step
        where it is predicted to run out (the cosine schedule's end, agreed over ranks)."""
        return self.step / max(1, self._total())

    def _total(self) -> int:
        return self.scheduler.lr_lambdas[0].total

    def _set_total(self, total: int) -> None:
        self.scheduler.lr_lambdas[0].total = total

    def evaluate(self, units: int | None = None) -> dict:
        """The model scored on ``units`` of held-out data (default train.eval_tokens)."""
        t = self.cfg.train
        return held_out(self.model, self.task, units or t.eval_tokens, t.eval_batch_size or t.batch_size,
                        device=self.device, precision=self.precision, dist=self.dist)

    def save(self) -> Path | None:
        """Write a checkpoint of the run as it stands (every rank takes part; rank 0 writes)."""
        t = self.cfg.train
        run = {"tokens": self.tokens, "elapsed": self.elapsed, "spec": self.spec.to_dict() if self.spec else None,
               "config": self.cfg.to_dict(), "precision": self.precision,
               "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None, "skipped": self.skipped,
               "metrics": {"train_loss": self.train_loss, "val": self.last_eval}, "recent": list(self.recent),
               "data_dir": self.data_dir}
        path = snapshot.save(self.parts, run, self.run_dir / "checkpoints", self.step, t.keep, self.callbacks.on_save)
        self.last_ckpt, self.saved_step = path or self.last_ckpt, self.step
        return path

    # -- one step ----------------------------------------------------------------------------
    def _stop(self, what: str, step: int, after: bool = False) -> None:
        """Raise ``NonFiniteLoss``: ``what`` failed at ``step`` (``after`` the update)."""
        self.optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLoss(guard.stop_message(what, step, self.last_ckpt, after))

    def _next_batch(self) -> dict:
        batch = to_device(self.task.next(), self.device)
        if self.state is not None:
            self.task.carry(self.state)
            self.loss_module.state = self.state
        return batch

    def _backward(self) -> tuple[list, int]:
        """Forward and backward over ``accum`` micro-batches: (their losses on the device, units)."""
        t, d = self.cfg.train, self.dist
        losses, units = [], 0
        if isinstance(self.model, SeesProgress):  # e.g. the Al-Rfou losses' layer cut-offs
            self.model.set_progress(self.progress)
        for i in range(t.accum):
            batch = self._next_batch()
            sync = i == t.accum - 1 or not d.active
            with (contextlib.nullcontext() if sync else distributed.no_sync(self.loss_fn, self.model, d)):
                with autocast(self.device, self.precision):
                    loss, _ = self.loss_fn(batch)
                self.scaler.scale(loss / t.accum).backward()
            losses.append(loss.detach().float())
            units += self.task.size(batch) * d.world_size
        return losses, units

    def train_step(self) -> tuple[float, float, int]:
        """One optimiser step; returns (mean loss over ranks, grad norm, units this step)."""
        if self.guard is not None:  # the checks on the device, read at once
            loss, norm, units = self._device_step()
            if (failed := guard.failure(self.guard)) is not None:
                self._stop(*failed)
            return float(loss), float(norm), units
        t, d = self.cfg.train, self.dist
        losses, units = self._backward()
        loss = distributed.mean([torch.stack(losses).mean().item()], d)[0]
        if not math.isfinite(loss):
            self._stop(guard.what(guard.LOSS, loss, None), self.step + 1)
        self.scaler.unscale_(self.optimizer)
        norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip or float("inf")))
        if not math.isfinite(norm) and not self.scaler.is_enabled():
            self._stop(guard.what(guard.NORM, loss, norm), self.step + 1)
        self.scaler.step(self.optimizer)  # fp16: skipped when the scaled gradients overflowed
        if self.scaler.is_enabled() and not math.isfinite(norm):
            self.skipped += 1
            if (scale := guard.overflows_unscaled(self.scaler)) is not None:
                self._stop(f"fp16 gradients overflow even unscaled (gradient norm {norm}, loss {loss:.4g}, {scale})",
                           self.step + 1)
        self.scaler.update()
        if not distributed.weights_finite(self.model, d):  # stop before anything saves them
            self._stop(guard.what(guard.WEIGHTS, loss, norm), self.step + 1, after=True)
        self._after_update()
        return loss, norm, units

    def _device_step(self) -> tuple[Tensor, Tensor, int]:
        """``train_step`` without reading anything back (``guard.device_step``)."""
        return guard.device_step(self.guard, self.step + 1, self._backward, self.model, self.optimizer,
                                 self.cfg.train.grad_clip, self._after_update)

    def _after_update(self) -> None:
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if isinstance(self.model, AfterStep):  # declared by the model (models/hooks.py), not probed
            self.model.after_step()

    # -- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train to the end; rank 0 holds the run directory's lock from the start to here (one writer)."""
        if self.dist.main and self._lock is None:
            self._lock = rundir.RunLock(self.run_dir)
        try:
            return self._fit()
        finally:
            self._release()

    def _fit(self) -> dict:
        t, d = self.cfg.train, self.dist
        wall0 = time.perf_counter()
        self.callbacks.on_stage("save")
        if d.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            checkpoint.clean_stale(self.run_dir / "checkpoints")
            dump(self.cfg, self.run_dir / "config.yaml")
        reports = isinstance(self.task, Reports)  # declared by the task (RL: mean episode return)
        log = Logger(self.run_dir if d.main else None, tensorboard=t.tensorboard, progress=t.progress,
                     total=t.max_steps, start_step=self.step, resume_step=self.step if self.ckpt is not None else None,
                     extra_fields=tuple(self.task.report_fields) if reports else ())
        start = StepRecord(self.step, self.tokens, 0, self._total(), elapsed_s=self.elapsed)
        self.clock.train_s, self.compile_s = 0.0, None  # this session's (evaluations and checkpoints excluded)
        try:
            calls = Callbacks([*self._own_callbacks(log), *self.callbacks])
            last = self._steps(calls, start, reports)
            calls.on_end(last)
        finally:
            log.close()
        result = self._result(last, time.perf_counter() - wall0, start.tokens, reports)
        calls.on_result(result)
        return result

    def _own_callbacks(self, log: Logger) -> list:
        """The run's own callbacks, in the order they see each step (the budget first: it moves the end)."""
        t, d, c = self.cfg.train, self.dist, self.clock
        checks = NonFiniteGuard(self.guard, self.check_every, t.log_every, recent=self.recent, log=log, clock=c,
                                stop=self._stop)
        return [TimeBudget(self.budget, self._set_total, clock=c, dist=d), checks,
                Progress(log, self.task.unit, self._total(), recent=self.recent, sync=checks.sync),
                MeasuredLine(log, self._to_end),
                Evaluation(self.evaluate, self.curve, self.budget, evals=self.evals, log=log, clock=c, dist=d,
                           sync=checks.sync),
                Checkpointing(t.ckpt_every, self.save, self.saved_step, clock=c, sync=checks.sync),
                ResultFile(self.run_dir if d.main else None)]

    def _steps(self, calls: Callbacks, rec: StepRecord, reports: bool) -> StepRecord:
        """Steps until ``max_steps`` or a callback stops the run; the last record, saying why it stopped."""
        t = self.cfg.train
        first, tokens0 = rec.step, rec.tokens
        while t.max_steps is None or self.step < t.max_steps:
            if (why := calls.stop(rec)) is not None:
                return dataclasses.replace(rec, stopped=why)
            rec = self._timed_step(first, tokens0, reports)
            calls.on_step(rec)
        return dataclasses.replace(rec, stopped="max_steps")

    def _timed_step(self, first: int, tokens0: int, reports: bool) -> StepRecord:
        """One step on the clock; ``first``, ``tokens0``: where this session started."""
        c = self.clock
        t0 = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]
        loss, norm, units = self._device_step() if self.guard is not None else self.train_step()
        dt = time.perf_counter() - t0
        if self.cfg.train.compile and c.step == first:
            # The first step of a process compiles the loss (tens of seconds, once): reported
            # as compile_s, not as training time, so rates and time budgets mean steady steps.
            self.compile_s, dt = dt, 0.0
        c.step, c.tokens = c.step + 1, c.tokens + units
        c.spend(dt, training=True)
        rate = (c.tokens - tokens0) / max(c.train_s, 1e-9)
        return StepRecord(c.step, c.tokens, c.step - first, self._total(), lr, loss, norm, rate, c.elapsed, c.train_s,
                          self.task.report() if reports else {})

    def _result(self, last: StepRecord, wall: float, tokens0: int, reports: bool) -> dict:
        e = self.last_eval
        extra = {f"val_{k}": e[k] for k in e if k not in ("step", "loss", "ppl", "acc", "tokens", "train_s", "eval_s",
                                                          "partial")}
        return {"member": self.cfg.member, "name": self.cfg.run_name, "params": self.params,
                "steps": self.step, "tokens": self.tokens, "unit": self.task.unit, "wall_s": wall,
                "train_s": self.train_s, "compile_s": self.compile_s, "elapsed_s": self.elapsed,
                "eval_s": sum(v["eval_s"] for v in self.evals[:-1]), "final_eval_s": e["eval_s"],
                "tokens_per_s": (self.tokens - tokens0) / max(self.train_s, 1e-9),
                "train_loss": self.train_loss, "val_loss": e["loss"], "val_bpc": e.get("bpc"), **extra,
                "val_ppl": e["ppl"], "val_acc": e["acc"], "stopped": last.stopped, "precision": self.precision,
                "skipped_steps": self.skipped, "notes": self.notes,
                "device": str(self.device), "threads": torch.get_num_threads(), "world_size": self.dist.world_size,
                # where threads and precision came from (startup.sources): set, machine calibration, probe, ...
                "threads_from": self.speed_from["threads"], "precision_from": self.speed_from["precision"],
                "run_dir": str(self.run_dir), "checkpoint": str(self.last_ckpt) if self.last_ckpt else None,
                # Validation against training seconds (evaluation time excluded), this process's evaluations.
                "curve": [{"step": v["step"], "train_s": v["train_s"], "val_loss": v["loss"], "val_bpc": v.get("bpc"),
                           "scored": v["tokens"]} for v in self.evals],
                **({f"train_{k}": v for k, v in self.task.report().items()} if reports else {})}

