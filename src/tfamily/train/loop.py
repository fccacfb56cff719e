"""The training loop: one ``Trainer`` for CPU, CUDA and torchrun.

Each step: ``accum`` micro-batches through ``model.loss`` under autocast, one
backward each (DDP syncs gradients on the last), clip the global gradient
norm, AdamW step, scheduler step, ``model.after_step()`` when the model has
one. Every step's mean loss is checked before the optimiser touches the
weights, so a non-finite loss stops the run with the weights and the last
checkpoint unchanged.

Exact resumption: batch t depends only on (seed, t), and a checkpoint holds
weights, AdamW moments, the scheduler, every rank's RNG states, the data
position and any carried model state, so a resumed run repeats the
uninterrupted run's losses bit for bit (same device and thread count).
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import members
from ..build import build
from ..spec import Spec
from . import checkpoint, distributed
from .batches import make_source
from .config import Config, apply_overrides, deep_merge, dump, from_dict, parse_duration
from .device import autocast, resolve_precision
from .evaluate import carried_state, evaluate, to_device
from .metrics import Logger
from .optim import adamw, flatten_optimizer, unflatten_optimizer, warmup_cosine


class NonFiniteLoss(RuntimeError):
    """The loss (or gradient norm) became NaN or infinite; the run stopped before updating."""


class LossOf(nn.Module):
    """``model.loss`` as a module forward, so DDP sees the call (it hooks ``forward``).
    A carried state rides on an attribute: DDP's input handling would copy a
    ``SegmentMemory`` into a plain list."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.state = None

    def forward(self, batch: dict):
        if self.state is not None:
            batch = {**batch, "state": self.state}
        return self.model.loss(batch)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_spec(cfg: Config, vocab_size: int, seq_len: int) -> Spec:
    """The member's spec with the config's ``model`` overrides, sized to the data's vocabulary."""
    d = deep_merge(members.get(cfg.member)().to_dict(), cfg.model)
    if "vocab_size" not in cfg.model:
        d["vocab_size"] = vocab_size
    elif not isinstance(d["vocab_size"], int) or d["vocab_size"] < vocab_size:
        raise ValueError(f"model.vocab_size={d['vocab_size']!r} is smaller than the data's vocabulary "
                         f"({vocab_size}); drop the override or raise it")
    if cfg.train.activation_checkpointing:
        d["depth"]["checkpointing"] = True
    spec = Spec.from_dict(d)
    if spec.position.name == "learned" and spec.position.max_len < seq_len:
        raise ValueError(f"model.position.max_len={spec.position.max_len} is shorter than the sequence length "
                         f"{seq_len}; set model.position.max_len >= {seq_len} or lower data.seq_len")
    return spec


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Trainer:
    def __init__(self, cfg: Config, *, data_dir=None, resume: str | Path | None = None):
        """``resume``: a run or checkpoint directory to continue; ``cfg`` should then be the
        checkpoint's config (see ``resume_config``), and the spec must match it."""
        t = cfg.train
        self.dist = d = distributed.setup(t.device)
        if isinstance(t.threads, int):
            torch.set_num_threads(t.threads)
        if t.batch_size % d.world_size:
            raise ValueError(f"train.batch_size={t.batch_size} is the global batch and must divide evenly "
                             f"over {d.world_size} ranks; use a multiple of {d.world_size}")
        self.device, self.precision = d.device, resolve_precision(t.precision, d.device)
        self.ckpt = checkpoint.load(resume) if resume is not None else None
        self.cfg = cfg
        seed_all(t.seed)
        self.source = make_source(cfg.data, t.batch_size // d.world_size, seed=t.seed, rank=d.rank,
                                  world_size=d.world_size, data_dir=data_dir)
        self.spec = make_spec(cfg, self.source.vocab_size, self.source.seq_len)
        self.model = build(self.spec).to(self.device)
        self.params = param_count(self.model)
        self.optimizer = adamw(self.model, t.lr, t.weight_decay, t.betas, t.eps)
        self.budget = parse_duration(t.time_budget, "train.time_budget")
        self.scheduler = warmup_cosine(self.optimizer, t.warmup, t.max_steps or t.warmup + 10**6, t.min_lr_ratio)
        self.step, self.tokens, self.elapsed = 0, 0, 0.0
        self.state, self.state_epoch = carried_state(self.model, cfg.data.stream), 0
        if d.active:  # distinct dropout noise per rank (the weights are identical: same seed)
            torch.manual_seed(t.seed + 1000003 * d.rank)
        self.run_dir = Path(cfg.train.out or f"runs/train/{cfg.run_name}")
        if self.ckpt is not None:
            self.run_dir = self.ckpt.path.parent.parent
            self._restore(self.ckpt)
        elif distributed.any_rank(d.main and bool(checkpoint.step_dirs(self.run_dir / "checkpoints")), d):
            raise ValueError(f"run directory {self.run_dir} already has checkpoints; continue it with "
                             f"--resume {self.run_dir} or pick another train.out")
        self.thread_rates = self.precision_rates = None
        if self.ckpt is not None and t.precision == "auto":
            self.precision = self.ckpt.meta.get("precision", self.precision)  # resume as it ran
        self._pick_auto(t.threads == "auto" and self.device.type == "cpu",
                        # bf16 on a CPU is not always faster (casts can outweigh the matmuls at
                        # small widths), so auto times it there; on CUDA it is kept. Resumed and
                        # multi-process runs keep the static choice (every rank must agree).
                        t.precision == "auto" and self.device.type == "cpu" and self.precision == "bf16"
                        and self.ckpt is None and not d.active)
        self.loss_module = LossOf(self.model)
        self.loss_fn = distributed.wrap(self.loss_module, d)
        if t.compile:
            self.loss_fn = torch.compile(self.loss_fn)
        self.last_ckpt: Path | None = self.ckpt.path if self.ckpt is not None else None
        self.saved_step = self.step if self.ckpt is not None else None  # known on every rank
        self.last_eval: dict | None = None
        self.recent: deque = deque(maxlen=50)

    def close(self, sync: bool = True) -> None:
        """Leave the process group (see ``distributed.teardown``), dropping the DDP wrapper
        first; ``sync=False`` after an error, when a peer may be gone."""
        self.loss_fn = None
        distributed.teardown(self.dist, sync)

    def _pick_auto(self, threads: bool, precision: bool) -> None:
        """``train.threads: auto`` (one thread or all) and ``train.precision: auto`` on a
        bf16-native CPU (fp32 or bf16): time each combination, keep the fastest, and record
        tokens/s per choice in ``thread_rates`` / ``precision_rates``."""
        most = torch.get_num_threads()
        counts = [1, most] if threads and most > 1 else [most]
        precisions = ["fp32", "bf16"] if precision else [self.precision]
        if len(counts) * len(precisions) == 1:
            self.thread_rates = {most: 0.0} if threads else None
            return
        rates = self._probe([(n, p) for n in counts for p in precisions])
        n, p = max(rates, key=rates.get)
        torch.set_num_threads(n)
        self.precision = p
        self.thread_rates = {m: rates[(m, p)] for m in counts} if threads else None
        self.precision_rates = {q: rates[(n, q)] for q in precisions} if precision else None

    def _probe(self, settings: list[tuple[int, str]], steps: int = 1, rounds: int = 2) -> dict:
        """Training tokens/s for each (threads, precision): a few optimiser steps of a
        throwaway copy of the model, the settings interleaved so a load change hits all.
        Restores the RNG and data position, so training is unaffected."""
        rng, position = torch.get_rng_state(), self.source.state_dict()
        batch = to_device(self.source.next(), self.device)
        self.source.load_state_dict(position)
        probe = build(self.spec).to(self.device)
        opt = adamw(probe, 1e-9, 0.0)
        seconds = dict.fromkeys(settings, 0.0)
        for r in range(rounds):
            for n, precision in settings:
                torch.set_num_threads(n)
                for timed in ([False] if r == 0 else []) + [True]:  # round 0: one untimed warm-up
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        with autocast(self.device, precision):
                            loss, _ = probe.loss(batch)
                        loss.backward()
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                    if timed:
                        seconds[(n, precision)] += time.perf_counter() - t0
        torch.set_rng_state(rng)
        tokens = batch["x"].numel() * steps * rounds
        return {key: tokens / sec for key, sec in seconds.items()}

    # -- checkpoints -------------------------------------------------------------------------
    def _restore(self, ck: checkpoint.Loaded) -> None:
        meta = ck.meta
        if meta["spec"] != self.spec.to_dict():
            diff = sorted(k for k in set(meta["spec"]) | set(self.spec.to_dict())
                          if meta["spec"].get(k) != self.spec.to_dict().get(k))
            raise ValueError(f"{ck.path} was trained with a different spec (differs in {diff}); "
                             f"resume without model overrides")
        ck.load_weights(self.model, self.device)
        self.optimizer.load_state_dict(unflatten_optimizer(ck.group("optimizer"), meta["optimizer"]))
        self.scheduler.load_state_dict(meta["scheduler"])
        self.source.load_state_dict(meta["data"])
        rng = ck.group("rng")
        mine = rng.get(f"torch.rank{self.dist.rank}")
        if mine is None and self.dist.active:
            raise ValueError(f"{ck.path} was written by {meta['world_size']} rank(s); "
                             f"resume it with the same number of processes")
        checkpoint.restore_rng(rng, meta["rng"], mine)
        self.step, self.tokens, self.elapsed = meta["step"], meta["tokens"], meta["elapsed"]
        if self.budget is None and self.cfg.train.max_steps:
            # A run resumed with a new --max-steps stretches (or shortens) its cosine to it.
            self.scheduler.lr_lambdas[0].total = self.cfg.train.max_steps
        if self.state is not None and meta.get("carry"):
            carry = ck.group("carry")
            for i, s in enumerate(self.state):
                s.memory = carry.get(f"memory.{i}.rank{self.dist.rank}")
                if s.memory is not None:
                    s.memory = s.memory.to(self.device)
            self.state.offset, self.state_epoch = meta["carry"]["offset"], meta["carry"]["epoch"]

    def save(self) -> Path | None:
        d = self.dist
        rng_t, rng_meta = checkpoint.capture_rng()
        for r, s in enumerate(distributed.gather(torch.get_rng_state(), d)):
            rng_t[f"torch.rank{r}"] = s
        opt_t, opt_meta = flatten_optimizer(self.optimizer.state_dict())
        groups = {"optimizer": opt_t, "rng": rng_t}
        carry_meta = None
        if self.state is not None:
            carry = {}
            for i, s in enumerate(self.state):
                if s.memory is not None:
                    for r, m in enumerate(distributed.gather(s.memory.contiguous(), d)):
                        carry[f"memory.{i}.rank{r}"] = m
            groups["carry"] = carry
            carry_meta = {"offset": self.state.offset, "epoch": self.state_epoch}
        path = None
        if d.main:
            meta = {"tokens": self.tokens, "elapsed": self.elapsed, "world_size": d.world_size,
                    "spec": self.spec.to_dict(), "config": self.cfg.to_dict(),
                    "vocab": self.source.vocab.to_json() if self.source.vocab is not None else None,
                    "source": {"name": self.source.name, "kind": self.source.kind, "seq_len": self.source.seq_len},
                    "scheduler": self.scheduler.state_dict(), "optimizer": opt_meta, "rng": rng_meta,
                    "data": self.source.state_dict(), "carry": carry_meta, "precision": self.precision,
                    "threads": torch.get_num_threads(),
                    "metrics": {"train_loss": self.train_loss, "val": self.last_eval}}
            json.dumps(meta)  # fail before writing anything if some state is not plain data
            path = checkpoint.write(self.run_dir / "checkpoints", self.step, self.model, groups, meta,
                                    self.cfg.train.keep)
            self.last_ckpt = path
        self.saved_step = self.step
        distributed.barrier(d)
        return path

    # -- one step ----------------------------------------------------------------------------
    @property
    def train_loss(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    def _next_batch(self) -> dict:
        batch = to_device(self.source.next(), self.device)
        if self.state is not None:
            if self.source.epoch != self.state_epoch:  # the stream wrapped: its memory is of other text
                self.state.reset()
                self.state_epoch = self.source.epoch
            self.loss_module.state = self.state
        return batch

    def train_step(self) -> tuple[float, float, int]:
        """One optimiser step; returns (mean loss over ranks, grad norm, tokens this step)."""
        t, d = self.cfg.train, self.dist
        losses, tokens = [], 0
        for i in range(t.accum):
            batch = self._next_batch()
            sync = i == t.accum - 1 or not d.active
            with (contextlib.nullcontext() if sync else self.loss_fn.no_sync()):
                with autocast(self.device, self.precision):
                    loss, _ = self.loss_fn(batch)
                (loss / t.accum).backward()
            losses.append(loss.detach().float())
            tokens += batch["x"].numel() * d.world_size
        loss = distributed.mean([torch.stack(losses).mean().item()], d)[0]
        if not math.isfinite(loss):
            self._stop(f"non-finite loss ({loss})", self.step + 1)
        norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip or float("inf")))
        if not math.isfinite(norm):
            self._stop(f"non-finite gradient norm ({norm}) with finite loss {loss:.4g}", self.step + 1)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if callable(getattr(self.model, "after_step", None)):
            self.model.after_step()
        return loss, norm, tokens

    def _stop(self, what: str, step: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        last = f"the last good checkpoint is {self.last_ckpt}" if self.last_ckpt else "no checkpoint was written yet"
        raise NonFiniteLoss(f"{what} at step {step}; stopped before the optimiser step, so the weights are "
                            f"unchanged and {last}. Try a lower train.lr, train.grad_clip=1.0, or "
                            f"train.precision=fp32")

    def evaluate(self) -> dict:
        t = self.cfg.train
        batches = self.source.eval_batches(t.eval_tokens, t.eval_batch_size or t.batch_size)
        return evaluate(self.model, batches, device=self.device, precision=self.precision, dist=self.dist,
                        stream=self.cfg.data.stream, text=self.source.kind == "text")

    # -- the loop ----------------------------------------------------------------------------
    def _final_eval_s(self, tokens_per_s: float) -> float:
        """Predicted time of the final evaluation: a forward pass costs about a third of a
        training step per token (Kaplan et al. 2020: 2N vs 6N FLOPs); 2.5x is the margin."""
        t = self.cfg.train
        n = self.source.eval_size(t.eval_tokens)
        return n / (2.5 * max(tokens_per_s, 1.0))  # ranks share both the eval and the throughput

    def _left(self, tokens_per_s: float) -> float:
        """Budget seconds left for training, keeping back the final evaluation."""
        return self.budget - self.elapsed - self._final_eval_s(tokens_per_s)

    def _horizon(self, steps_run: int, seconds: float, tokens_per_s: float) -> None:
        """Time budget: move the cosine's end to where the budget will run out (same on all ranks)."""
        t = self.cfg.train
        rate = steps_run / max(seconds, 1e-9)
        est = self.step + rate * max(0.0, self._left(tokens_per_s))
        est = distributed.mean([est], self.dist)[0]
        total = int(min(est, t.max_steps) if t.max_steps else est)
        self.scheduler.lr_lambdas[0].total = max(total, self.step + 1)

    def fit(self) -> dict:
        t, d = self.cfg.train, self.dist
        wall0 = time.perf_counter()
        if d.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            checkpoint.clean_stale(self.run_dir / "checkpoints")
            dump(self.cfg, self.run_dir / "config.yaml")
        resumed = self.step if self.ckpt is not None else None
        log = Logger(self.run_dir if d.main else None, tensorboard=t.tensorboard, progress=t.progress,
                     total=t.max_steps, start_step=self.step, resume_step=resumed)
        start_step, start_tokens, train_s, last_note = self.step, self.tokens, 0.0, time.perf_counter()
        tps = 0.0
        stopped = "max_steps"
        try:
            while t.max_steps is None or self.step < t.max_steps:
                if self.budget is not None and distributed.any_rank(
                        self.elapsed >= self.budget or (self.step > start_step and self._left(tps) <= 0), d):
                    stopped = "time_budget"
                    break
                t0 = time.perf_counter()
                lr = self.scheduler.get_last_lr()[0]
                loss, norm, tokens = self.train_step()
                dt = time.perf_counter() - t0
                self.step, self.tokens, self.elapsed, train_s = self.step + 1, self.tokens + tokens, \
                    self.elapsed + dt, train_s + dt
                self.recent.append(loss)
                tps = (self.tokens - start_tokens) / max(train_s, 1e-9)
                ran = self.step - start_step
                if self.budget is not None and (ran in (1, 2, 5) or ran % 10 == 0):
                    self._horizon(ran, train_s, tps)
                    log.set_total(self.scheduler.lr_lambdas[0].total)
                log.step(loss=loss, tok_s=round(tps))
                if self.step % t.log_every == 0:
                    log.log_train({"step": self.step, "tokens": self.tokens, "loss": loss, "lr": lr,
                                   "grad_norm": norm, "tokens_per_s": tps, "elapsed_s": self.elapsed})
                if log.bar is None or log.bar.disable:
                    if time.perf_counter() - last_note > 30:
                        last_note = time.perf_counter()
                        log.message(f"step {self.step}: loss {self.train_loss:.4f}, {tps:.0f} tokens/s, "
                                    f"{self.elapsed:.0f} s")
                e0 = time.perf_counter()
                if t.eval_every and self.step % t.eval_every == 0:
                    self._record_eval(log)
                if t.ckpt_every and self.step % t.ckpt_every == 0:
                    self.save()
                self.elapsed += time.perf_counter() - e0
                checkpoint.halt_point("step", self.step)
            if self.last_eval is None or self.last_eval["step"] != self.step:
                self._record_eval(log)
            if self.saved_step != self.step:
                self.save()
        finally:
            log.close()
        wall = time.perf_counter() - wall0
        e = self.last_eval
        result = {"member": self.cfg.member, "name": self.cfg.run_name, "params": self.params,
                  "steps": self.step, "tokens": self.tokens, "wall_s": wall, "train_s": train_s,
                  "tokens_per_s": (self.tokens - start_tokens) / max(train_s, 1e-9),
                  "train_loss": self.train_loss, "val_loss": e["loss"], "val_bpc": e.get("bpc"),
                  "val_ppl": e["ppl"], "val_acc": e["acc"], "stopped": stopped, "precision": self.precision,
                  "device": str(self.device), "threads": torch.get_num_threads(), "world_size": d.world_size, "run_dir": str(self.run_dir),
                  "checkpoint": str(self.last_ckpt) if self.last_ckpt else None}
        if d.main:
            (self.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        return result

    def _record_eval(self, log: Logger) -> None:
        e = self.evaluate()
        self.last_eval = {"step": self.step, **e}
        log.log_eval({"step": self.step, "tokens": self.tokens, **{k: e.get(k) for k in ("loss", "bpc", "ppl", "acc")}})


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
