"""The loop's callbacks: what a callback is told (every step's record, the stages, the saves, the end
and the result), a callback that stops the run, the guard callback's reads of the checks kept on the
device, and callbacks installed around a command."""
from __future__ import annotations

import math
from collections import deque

import pytest
import torch

from tfamily import cli
from tfamily.train import checkpoint, guard, loop
from tfamily.train.callbacks import STAGES, Callbacks, Clock, NonFiniteGuard, StepRecord, installed
from tfamily.train.metrics import read_csv

from .test_loop import TINY, cfg, poison_loss


class Recorder:
    """Every hook, recorded in order."""

    def __init__(self):
        self.seen: list[tuple] = []

    def on_stage(self, stage: str) -> None:
        self.seen.append(("stage", stage))

    def on_step(self, rec: StepRecord) -> None:
        self.seen.append(("step", rec))

    def on_save(self, step: int, phase: str) -> None:
        self.seen.append(("save", step, phase))

    def on_end(self, rec: StepRecord) -> None:
        self.seen.append(("end", rec))

    def on_result(self, result: dict) -> None:
        self.seen.append(("result", result))

    def of(self, kind: str) -> list:
        return [s[1:] if len(s) > 2 else s[1] for s in self.seen if s[0] == kind]


def test_a_callback_sees_every_step_record_the_saves_the_end_and_the_result(tmp_path):
    rec = Recorder()
    trainer = loop.Trainer(cfg(tmp_path, train__ckpt_every=3), callbacks=[rec])
    result = trainer.fit()
    assert rec.of("stage") == list(STAGES)
    steps = rec.of("step")
    assert [r.step for r in steps] == list(range(1, 7)) and [r.ran for r in steps] == list(range(1, 7))
    assert [r.tokens for r in steps] == [8 * 32 * s for s in range(1, 7)]
    assert all(r.total == 6 and r.units_per_s > 0 and r.stopped is None for r in steps)
    # The records hold the step's own numbers: train.csv's rows, written from the same values.
    rows = read_csv(tmp_path / "run" / "train.csv")
    assert [repr(r.loss) for r in steps] == [row["loss"] for row in rows]
    assert [repr(r.lr) for r in steps] == [row["lr"] for row in rows]
    assert steps[0].elapsed_s <= steps[-1].elapsed_s and steps[-1].train_s <= result["train_s"]
    assert rec.of("save") == [(3, "begin"), (3, "files"), (6, "begin"), (6, "files")]
    (end,) = rec.of("end")
    assert end.step == 6 and end.stopped == "max_steps" == result["stopped"]
    assert rec.of("result") == [result]
    kinds = [s[0] for s in rec.seen]
    assert kinds.index("end") > max(i for i, k in enumerate(kinds) if k in ("step", "save"))
    assert kinds[-1] == "result"


class StopAt:
    def __init__(self, step: int):
        self.step = step

    def stop(self, last: StepRecord) -> str | None:
        return "enough" if last.step >= self.step else None


def test_a_callback_can_stop_the_run_and_the_end_is_saved_and_evaluated(tmp_path):
    trainer = loop.Trainer(cfg(tmp_path), callbacks=[StopAt(4)])
    result = trainer.fit()
    trainer.close()
    assert result["steps"] == 4 and result["stopped"] == "enough"
    assert [s for s, _ in checkpoint.step_dirs(tmp_path / "run" / "checkpoints")] == [4]
    assert result["curve"][-1]["step"] == 4


def test_a_non_finite_loss_stops_the_run_before_any_callback_sees_its_step(tmp_path, monkeypatch):
    poison_loss(monkeypatch, 3)
    rec = Recorder()
    trainer = loop.Trainer(cfg(tmp_path, train__ckpt_every=2), callbacks=[rec])
    with pytest.raises(loop.NonFiniteLoss, match=r"non-finite loss \(nan\) at step 3"):
        trainer.fit()
    assert [r.step for r in rec.of("step")] == [1, 2] and all(math.isfinite(r.loss) for r in rec.of("step"))
    assert rec.of("end") == [] and rec.of("result") == []


class _Log:
    def __init__(self):
        self.rows: list[dict] = []

    def log_train(self, row: dict) -> None:
        self.rows.append(dict(row))


def _device_record(g: guard.Guard, step: int, loss: float) -> StepRecord:
    """A step as ``Trainer._device_step`` leaves it: its checks noted on the device, values unread."""
    value = torch.tensor(loss)
    g.note(step, guard.LOSS, ~value.isfinite(), value)
    return StepRecord(step, 100 * step, step, 10, loss=value, grad_norm=torch.tensor(1.0))


def test_the_guard_callback_reads_the_device_checks_and_refuses_a_non_finite_loss():
    g, log, clock, recent, stops = guard.Guard(torch.device("cpu")), _Log(), Clock(), deque(maxlen=50), []

    def stop(what: str, step: int, after: bool) -> None:
        stops.append((what, step, after))
        raise loop.NonFiniteLoss(what)
    checks = NonFiniteGuard(g, 4, 1, recent=recent, log=log, clock=clock, stop=stop)
    for step in (1, 2, 3):
        checks.on_step(_device_record(g, step, 0.5 * step))
    assert log.rows == [] and not recent  # nothing read before a check point
    checks.sync()  # a callback about to read (a log line, an evaluation, a checkpoint)
    assert [r["step"] for r in log.rows] == [1, 2, 3] and list(recent) == [0.5, 1.0, 1.5]
    assert all(isinstance(r["loss"], float) for r in log.rows) and clock.train_s > 0
    checks.on_step(_device_record(g, 4, 2.0))  # a check point: read at once
    checks.on_step(_device_record(g, 5, float("nan")))
    with pytest.raises(loop.NonFiniteLoss, match="non-finite loss"):
        checks.on_step(_device_record(g, 6, 3.0))
        checks.on_end(StepRecord(6, 600, 6, 10))
    assert stops == [("non-finite loss (nan)", 5, False)]
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4]  # the rows before the failed step are kept


def test_callbacks_refuse_an_object_with_no_hook():
    with pytest.raises(TypeError, match="implement none of the hooks"):
        Callbacks([object()])


def test_installed_callbacks_see_the_runs_a_command_starts(tmp_path, capsys):
    rec = Recorder()
    argv = ["train", *(f"{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                       for k, v in TINY.items()), "--steps", "2", "--out", str(tmp_path / "run")]
    with installed(rec):
        assert cli.main(argv) == 0
    assert [r.step for r in rec.of("step")] == [1, 2] and rec.of("result")[0]["steps"] == 2
    later = loop.Trainer(cfg(tmp_path, train__out=str(tmp_path / "other")))
    assert rec not in later.callbacks  # gone with the block
    later.close()
