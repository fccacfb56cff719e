"""The training loop: one ``Trainer`` driving a ``Task`` on CPU, CUDA and torchrun.

Each step: ``accum`` micro-batches from the task through ``model.loss`` under autocast,
one backward each (DDP or FSDP syncs gradients on the last; in fp16 the loss is scaled first,
``device.grad_scaler``), clip the global gradient norm, AdamW step (in fp16 skipped when
the scaled gradients overflowed), scheduler step, ``model.after_step()`` when the model
has one. Every step's mean loss is checked before the optimiser touches the weights, so a
non-finite loss stops the run with the weights and the last checkpoint unchanged.

The parts, each in its own module: the task (``task.py``, ``tasks/``) gives batches,
their size and the evaluation; ``autotune.py`` picks threads and precision;
``budget.py`` stops a timed run and refits its schedule; ``snapshot.py`` writes and
restores the whole resumable state (exact: a resumed run repeats the uninterrupted
run's losses bit for bit); the model's carried state goes through the State protocol
(``nn/state/``). The loop never looks inside a batch or a state.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from collections import deque
from pathlib import Path

import torch
from torch import nn

from ..build import build
from ..models.hooks import AfterStep, SeesProgress
from ..sizes import check_fits
from ..spec import Spec
from . import checkpoint, distributed, finetune, guard, resolve, rundir, snapshot, startup
from .budget import Budget, Curve
from .config import Config, apply_overrides, dump, from_dict, parse_duration
from .device import autocast, grad_scaler, resolve_precision
from .evaluate import carried_state, held_out, record, to_device
from .guard import NonFiniteLoss  # noqa: F401 (raised here, caught by the commands as loop.NonFiniteLoss)
from .metrics import Logger
from .optim import make_optimizer, warmup_cosine
from .rng import seed_all
from .task import Reports, Task
from .tasks import make_task


class LossOf(nn.Module):
    """``model.loss`` as a module forward, so DDP sees the call (it hooks ``forward``).
    A carried state rides on an attribute: DDP's input handling would copy a
    state that is a list (``SegmentMemory``) into a plain list."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.state = None

    def forward(self, batch: dict):
        if self.state is not None:
            batch = {**batch, "state": self.state}
        return self.model.loss(batch)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Trainer:
    def __init__(self, cfg: Config, *, data_dir=None, resume: str | Path | None = None, task: Task | None = None,
                 spec: Spec | None = None, model: nn.Module | None = None):
        """``resume``: a run or checkpoint directory to continue; ``cfg`` should then be the
        checkpoint's config (see ``resume_config``), and the spec must match it.
        ``task``: the work (default: the one ``cfg.data`` names); ``spec``: the model (default:
        ``cfg.member`` with ``cfg.model``, sized to the task); ``model``: an already built model
        with ``loss(batch)`` (a model outside the family, e.g. in a test), instead of a spec. The member
        decides what the config leaves open (``resolve.py``): ``data.stream`` and sizes fitted to the context."""
        t = cfg.train
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

    def _setup(self, cfg: Config, data_dir, resume, task: Task | None, spec: Spec | None, model: nn.Module | None):
        t, d = cfg.train, self.dist
        if resume is None and distributed.any_rank(
                d.main and bool(checkpoint.step_dirs(self.run_dir / "checkpoints")), d):
            raise ValueError(f"run directory {self.run_dir} already has checkpoints; continue it with "
                             f"--resume {self.run_dir} or pick another train.out")
        self.ckpt = checkpoint.load(resume) if resume is not None else None
        if isinstance(t.threads, int):
            torch.set_num_threads(t.threads)
        elif t.threads in ("auto", "machine") and self.ckpt is not None and isinstance(
                self.ckpt.meta.get("threads"), int):
            torch.set_num_threads(self.ckpt.meta["threads"])  # resume as it ran (bitwise)
        self.device, self.precision = d.device, resolve_precision(t.precision, d.device)
        if data_dir is None and self.ckpt is not None:
            data_dir = self.ckpt.meta.get("data_dir")  # a resumed run reads the data it ran on
        self.data_dir = str(Path(data_dir).expanduser().resolve()) if data_dir is not None else None
        seed_all(t.seed)
        self.notes: list[str] = []  # one line each, printed at start (resolve.py)
        rundir.pause_point("data")
        if task is None:
            spec_dict = spec.to_dict() if spec is not None else resolve.member_dict(cfg) if model is None else None
            if spec_dict is not None:  # a member whose state crosses segments streams by default
                streams, note = resolve.stream(cfg, spec_dict)
                cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, stream=streams))
                self.notes += [note] if note else []
            objective = spec_dict["objective"]["name"] if model is None and spec is None else None
            task = make_task(cfg.data, t.batch_size // d.world_size, seed=t.seed, rank=d.rank, world_size=d.world_size,
                             data_dir=data_dir, objective=objective, vocab=finetune.vocab(cfg, self.ckpt))
        self.cfg, self.task = cfg, task
        rundir.pause_point("build")
        if model is None:
            if spec is None:
                spec, note = resolve.make_spec(cfg, task.vocab_size, task.seq_len,
                                               task.n_classes if task.kind == "classification" else None)
                self.notes += [note] if note else []
            self.spec = spec
            # Refuse sizes the machine cannot hold before allocating any of them.
            check_fits(self.spec, batch=t.batch_size // d.world_size, seq_len=task.seq_len, training=True,
                       device=self.device)
            self.notes += [n for n in [resolve.dense_note(spec, task.seq_len)] if n]
            model = finetune.prepare(build(self.spec), cfg, self.ckpt is None, self.notes)  # init_from, LoRA
        else:
            self.spec = None
        self.model = distributed.shard(model.to(self.device), d)  # FSDP: before the optimiser sees them
        self.params = param_count(self.model)
        self.budget = Budget(parse_duration(t.time_budget, "train.time_budget"), t.max_steps,
                             task.eval_size(t.eval_tokens))
        self.curve = Curve(t.eval_every, t.log_every, self.budget.eval_units,
                           (t.eval_batch_size or t.batch_size) * task.seq_len)
        meta = self.ckpt.meta if self.ckpt is not None else {}
        self.step, self.tokens, self.elapsed, self.train_s = meta.get("step", 0), 0, meta.get("elapsed", 0.0), 0.0
        if self.ckpt is not None and t.precision in ("auto", "machine"):
            self.precision = meta.get("precision", self.precision)  # resume as it ran
        rundir.pause_point("autotune")
        self._autotune(*startup.to_time(self))  # before the optimiser, whose first import takes seconds
        if d.main:  # the start line, then what the member decided (resolve.py)
            print("\n".join([startup.first_line(self, self.step_s), *(f"note: {n}" for n in self.notes)]),
                  file=sys.stderr, flush=True)
        self.optimizer = make_optimizer(t.optimizer, self.model, t.lr, t.weight_decay, t.betas, t.eps, t.fused)
        self.scheduler = warmup_cosine(self.optimizer, t.warmup, t.max_steps or t.warmup + 10**6, t.min_lr_ratio)
        self.recent: deque = deque(maxlen=50)  # the last losses; train_loss is their mean (checkpointed)
        self.state = carried_state(self.model, task.carries_state)
        if d.active:  # distinct dropout noise per rank (the weights are identical: same seed)
            torch.manual_seed(t.seed + 1000003 * d.rank)
        if self.ckpt is not None:
            snapshot.restore(self, self.ckpt)
            if self.budget.seconds is None and t.max_steps:
                # A run resumed with a new --steps stretches (or shortens) its cosine to it.
                self.scheduler.lr_lambdas[0].total = t.max_steps
        # fp16 only, which the autotune (bf16 against fp32) never picks.
        self.scaler, self.skipped = grad_scaler(self.device, self.precision), 0
        if self.ckpt is not None:
            snapshot.restore_scaler(self, self.ckpt)
        self.check_every = guard.check_every(self)
        self.guard = guard.Guard(self.device) if self.check_every > 1 else None
        self.pending: list[dict] = []  # steps taken since the last check (guard.py), their values on the device
        self.loss_module = LossOf(self.model)
        self.loss_fn = distributed.wrap(self.loss_module, d)
        if t.compile:
            self.loss_fn = torch.compile(self.loss_fn)
        self.last_ckpt: Path | None = self.ckpt.path if self.ckpt is not None else None
        self.saved_step = self.step if self.ckpt is not None else None  # known on every rank
        self.last_eval: dict | None = None
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
        choice = startup.tune(self, threads, precision)
        self.precision, self.step_s = choice.precision, choice.step_s
        self.thread_rates, self.precision_rates = choice.thread_rates, choice.precision_rates

    def _measure(self, settings: list[tuple[int, str]], budget_s: float | None = None) -> dict:
        return startup.measure(self, settings, budget_s)

    save = snapshot.save
    # The non-finite checks (guard.py): stopping, fp16's skipped steps, and the checks kept on the device.
    _stop, _skipped_step = guard.stop, guard.skipped_step
    _device_step, check, _flush = guard.device_step, guard.check, guard.flush

    # -- one step ----------------------------------------------------------------------------
    @property
    def train_loss(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    def _next_batch(self) -> dict:
        batch = to_device(self.task.next(), self.device)
        if self.state is not None:
            self.task.carry(self.state)
            self.loss_module.state = self.state
        return batch

    @property
    def progress(self) -> float:
        """Steps taken over the planned total: ``max_steps``, or for a time budget the step
        where it is predicted to run out (the cosine schedule's end, agreed over ranks)."""
        return self.step / max(1, self.scheduler.lr_lambdas[0].total)

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
            self.check()
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
            self._skipped_step(norm, loss)
        self.scaler.update()
        if not distributed.weights_finite(self.model, d):  # stop before anything saves them
            self._stop(guard.what(guard.WEIGHTS, loss, norm), self.step + 1, after=True)
        self._after_update()
        return loss, norm, units

    def _after_update(self) -> None:
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if isinstance(self.model, AfterStep):  # declared by the model (models/hooks.py), not probed
            self.model.after_step()

    evaluate, _record_eval = held_out, record  # evaluate.py: on train.eval_tokens or the curve's units

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
        rundir.pause_point("save")
        if d.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            checkpoint.clean_stale(self.run_dir / "checkpoints")
            dump(self.cfg, self.run_dir / "config.yaml")
        resumed = self.step if self.ckpt is not None else None
        reports = isinstance(self.task, Reports)  # declared by the task (RL: mean episode return)
        log = Logger(self.run_dir if d.main else None, tensorboard=t.tensorboard, progress=t.progress,
                     total=t.max_steps, start_step=self.step, resume_step=resumed,
                     extra_fields=tuple(self.task.report_fields) if reports else ())
        start_step, start_tokens, start_elapsed, last_note = self.step, self.tokens, self.elapsed, time.perf_counter()
        self.train_s = 0.0  # this session's training seconds (evaluations and checkpoints excluded)
        self.compile_s = None  # with train.compile: the first step's seconds, compilation included
        rate, stopped, told = 0.0, "max_steps", False
        try:
            while t.max_steps is None or self.step < t.max_steps:
                if self.budget.spent(self.elapsed, self.step - start_step, rate, d):
                    stopped = "time_budget"
                    break
                t0 = time.perf_counter()
                lr = self.scheduler.get_last_lr()[0]
                loss, norm, units = self._device_step() if self.guard is not None else self.train_step()
                dt = time.perf_counter() - t0
                if t.compile and self.step == start_step:
                    # The first step of a process compiles the loss (tens of seconds, once): reported
                    # as compile_s, not as training time, so rates and time budgets mean steady steps.
                    self.compile_s, dt = dt, 0.0
                self.step, self.tokens, self.elapsed, self.train_s = self.step + 1, self.tokens + units, \
                    self.elapsed + dt, self.train_s + dt
                rate = (self.tokens - start_tokens) / max(self.train_s, 1e-9)
                ran = self.step - start_step
                if self.budget.seconds is not None and Budget.refit_now(ran):
                    total = self.budget.horizon(self.step, ran, self.elapsed - start_elapsed, self.elapsed, rate, d)
                    self.scheduler.lr_lambdas[0].total = total
                    log.set_total(total)
                report = self.task.report() if reports else {}
                due = self.curve.due(self.step, self.scheduler.lr_lambdas[0].total)
                speed = "tok_s" if self.task.unit == "tokens" else f"{self.task.unit}/s"
                self.pending.append({"step": self.step, "tokens": self.tokens, "loss": loss, "lr": lr,
                                     "grad_norm": norm, "tokens_per_s": rate, "elapsed_s": self.elapsed, **report})
                note = (log.bar is None or log.bar.disable) and time.perf_counter() - last_note > 30
                if self.guard is None or note or self.step % self.check_every == 0 or \
                        due or (t.ckpt_every and self.step % t.ckpt_every == 0):
                    self._flush(log)
                log.step(**({"loss": self.recent[-1]} if self.recent else {}), **{speed: round(rate)},
                         **{k: v for k, v in report.items() if v is not None})
                if not told and startup.tell(ran, self.train_s):  # the start line's estimate, measured
                    told = True
                    log.message(startup.measured_line(self, ran, self.train_s))
                if note:
                    last_note = time.perf_counter()
                    log.message(f"step {self.step}: loss {self.train_loss:.4f}, {rate:.0f} {self.task.unit}/s, "
                                f"{self.elapsed:.0f} s")
                e0 = time.perf_counter()
                if due:
                    self._record_eval(log, self.curve.eval_units(self.budget, self.scheduler.lr_lambdas[0].total,
                                                                 self.train_s / ran, rate, d))
                if t.ckpt_every and self.step % t.ckpt_every == 0:
                    self.save()
                self.elapsed += time.perf_counter() - e0
                checkpoint.halt_point("step", self.step)
            self._flush(log)
            if self.last_eval is None or self.last_eval["step"] != self.step or self.last_eval["partial"]:
                e0 = time.perf_counter()
                self._record_eval(log)
                self.elapsed += time.perf_counter() - e0  # the run's clock counts its final evaluation
            if self.saved_step != self.step:
                self.save()
        finally:
            log.close()
        wall = time.perf_counter() - wall0
        e = self.last_eval
        extra = {f"val_{k}": e[k] for k in e if k not in ("step", "loss", "ppl", "acc", "tokens", "train_s", "eval_s",
                                                          "partial")}
        result = {"member": self.cfg.member, "name": self.cfg.run_name, "params": self.params,
                  "steps": self.step, "tokens": self.tokens, "unit": self.task.unit, "wall_s": wall,
                  "train_s": self.train_s, "compile_s": self.compile_s, "elapsed_s": self.elapsed,
                  "eval_s": sum(v["eval_s"] for v in self.evals[:-1]), "final_eval_s": e["eval_s"],
                  "tokens_per_s": (self.tokens - start_tokens) / max(self.train_s, 1e-9),
                  "train_loss": self.train_loss, "val_loss": e["loss"], "val_bpc": e.get("bpc"), **extra,
                  "val_ppl": e["ppl"], "val_acc": e["acc"], "stopped": stopped, "precision": self.precision,
                  "skipped_steps": self.skipped, "notes": self.notes,
                  "device": str(self.device), "threads": torch.get_num_threads(), "world_size": d.world_size,
                  # where threads and precision came from (startup.sources): set, machine calibration, probe, ...
                  "threads_from": self.speed_from["threads"], "precision_from": self.speed_from["precision"],
                  "run_dir": str(self.run_dir), "checkpoint": str(self.last_ckpt) if self.last_ckpt else None,
                  # Validation against training seconds (evaluation time excluded), this process's evaluations.
                  "curve": [{"step": v["step"], "train_s": v["train_s"], "val_loss": v["loss"], "val_bpc": v.get("bpc"),
                             "scored": v["tokens"]} for v in self.evals],
                  **({f"train_{k}": v for k, v in self.task.report().items()} if reports else {})}
        if d.main:
            (self.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        return result


def resume_config(path: str | Path, overrides: dict | None = None) -> Config:
    """The config saved with the checkpoint at ``path`` with dotted ``overrides`` on top
    (e.g. ``{"train.max_steps": 4000}`` to train longer)."""
    return from_dict(apply_overrides(checkpoint.load(path).meta["config"], overrides or {}))


def train(cfg: Config, *, data_dir=None, resume=None) -> dict:
    """Train ``cfg`` (or continue the run at ``resume``) and return the result dict."""
    trainer = Trainer(cfg, data_dir=data_dir, resume=resume)
    try:
        result = trainer.fit()
    except BaseException:
        trainer.close(sync=False)
        raise
    trainer.close()
    return result
