"""Metrics out: CSV files, TensorBoard event files and a progress bar (rank 0 only).

``train.csv`` gets one row per logged step and ``eval.csv`` one per evaluation.
Losses are written with ``repr`` so a resumed run's curve can be compared with
an uninterrupted one bit for bit. When a run resumes from step s, rows after s
(written by the killed process after its last checkpoint) are dropped, and
TensorBoard is told to purge events after s, so both logs read as one run.
"""
from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path

from ..base import textload
from ..base.numbers import cut

TRAIN_FIELDS = ["step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"]
EVAL_FIELDS = ["step", "tokens", "loss", "bpc", "ppl", "acc"]


class CSVLog:
    def __init__(self, path: Path, fields: list[str], resume_step: int | None = None):
        self.path, self.fields = path, fields
        rows = _rows_up_to(path, resume_step) if resume_step is not None and path.is_file() else []
        self._f = open(path, "w", newline="", encoding="utf-8")
        self._w = csv.DictWriter(self._f, fieldnames=fields, extrasaction="ignore")
        self._w.writeheader()
        self._w.writerows(rows)
        self._f.flush()

    def write(self, row: dict) -> None:
        self._w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
        self._f.flush()

    def close(self) -> None:
        self._f.close()


LOG_BYTES = 1 << 30  # a long run logs ~100 bytes a row; far below this


def read_csv(path: Path) -> list[dict]:
    """The rows of a run's ``train.csv`` / ``eval.csv`` (through the bounded loader)."""
    return textload.read_csv(path, LOG_BYTES)


def rollout_returns(run: Path) -> tuple[list[int], list[float]]:
    """(env steps, batch-mean return) once per rollout, from the run's train.csv (the loop logs
    every PPO update; a rollout's updates share its env-step count and its return): the RL
    curve that `tfamily rl table` and `tfamily compare` draw."""
    xs, ys = [], []
    for i, r in enumerate(read_csv(run / "train.csv"), 2):
        if r.get("mean_return") in (None, ""):
            continue
        try:
            x, y = int(r["tokens"]), float(r["mean_return"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{run / 'train.csv'} row {i} has tokens={cut(r.get('tokens'))} and mean_return="
                             f"{cut(r.get('mean_return'))}, not numbers; the file is corrupt or hand-edited") from None
        if not xs or x != xs[-1]:
            xs.append(x)
            ys.append(y)
    return xs, ys


def _rows_up_to(path: Path, step: int) -> list[dict]:
    """The rows of ``path`` up to ``step`` for a resumed run; a log that is not tfamily's (a row
    without an integer step, a non-UTF-8 byte) is named and started again, as any corrupt file
    tfamily writes for itself is rebuilt."""
    try:
        return [r for r in read_csv(path) if int(r["step"]) <= step]
    except (ValueError, TypeError, KeyError) as e:
        print(f"tfamily: note: {path} is corrupt ({str(e)[:120]}); its rows before step {step} "
              f"are dropped and it is written again from here", file=sys.stderr)
        return []


class Logger:
    """Everything a run writes besides checkpoints; a no-op on ranks other than 0."""

    def __init__(self, run_dir: Path | None, *, tensorboard: bool, progress: bool, total: int | None,
                 start_step: int = 0, resume_step: int | None = None, extra_fields: tuple[str, ...] = ()):
        """``extra_fields``: the task's own train columns (``task.Reports``)."""
        self.active = run_dir is not None
        self.extra_fields = tuple(extra_fields)
        self.train = self.eval = self.tb = self.bar = None
        if not self.active:
            return
        self.train = CSVLog(run_dir / "train.csv", TRAIN_FIELDS + list(self.extra_fields), resume_step)
        self.eval = CSVLog(run_dir / "eval.csv", EVAL_FIELDS, resume_step)
        if resume_step is None:
            # A fresh run reuses only a directory without checkpoints (an aborted run's): its event
            # files would draw the old curve under the new one, as the CSVs above start afresh.
            for old in (run_dir / "tb").glob("events.out.tfevents.*"):
                old.unlink()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=None if resume_step is None else resume_step + 1)
        if progress:
            from tqdm import tqdm
            try:  # a terminal reporting size 0 x 0 (some ptys) would hide the bar
                size = os.get_terminal_size(sys.stderr.fileno())
                sized = size.columns > 0 and size.lines > 0
            except (OSError, ValueError):
                sized = False
            self.bar = tqdm(total=total, initial=start_step, unit="step", dynamic_ncols=sized,
                            ncols=None if sized else 100, nrows=None if sized else 24, file=sys.stderr,
                            disable=None)  # None: off when stderr is not a terminal

    def set_total(self, total: int) -> None:
        if self.bar is not None and self.bar.total != total:
            self.bar.total = total
            self.bar.refresh()

    def step(self, n: int = 1, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in postfix.items()},
                                     refresh=False)

    def log_train(self, row: dict) -> None:
        if not self.active:
            return
        self.train.write(row)
        if self.tb is not None:
            for k in ("loss", "lr", "grad_norm", "tokens_per_s", *self.extra_fields):
                if row.get(k) is not None:
                    self.tb.add_scalar(f"train/{k}", row[k], row["step"])

    def log_eval(self, row: dict, extra: dict | None = None) -> None:
        """``extra``: a task's own evaluation values (an RL run's mean return), shown in the message."""
        if not self.active:
            return
        self.eval.write(row)
        if self.tb is not None:
            for k in ("loss", "bpc", "ppl", "acc"):
                if row.get(k) is not None:
                    self.tb.add_scalar(f"val/{k}", row[k], row["step"])
        self.message(f"step {row['step']}: val loss {row['loss']:.4f}"
                     + (f", bpc {row['bpc']:.4f}" if row.get("bpc") is not None else "")
                     + (f", acc {row['acc']:.4f}" if row.get("acc") is not None and math.isfinite(row["acc"]) else "")
                     + "".join(f", {k} {v:.4g}" for k, v in (extra or {}).items()))

    def message(self, text: str) -> None:
        if not self.active:
            return
        if self.bar is not None and not self.bar.disable:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.active:
            return
        for x in (self.train, self.eval, self.tb, self.bar):
            if x is not None:
                x.close()
