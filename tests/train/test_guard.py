"""The non-finite checks kept on the device (``train.check_every`` > 1): the same run as checking
every step, bit for bit, while every step passes; a failed step is skipped on the device, every later
one too, and the run stops naming it, with the weights as they were before it."""
from __future__ import annotations

import pytest
import torch

from tfamily.train import checkpoint, fit, guard, loop
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

from .test_loop import TINY, nan_loss, poison_loss, weights_after


def _cfg(tmp_path, name, **kw):
    return load(None, {**TINY, "train.out": str(tmp_path / name), "train.max_steps": 12,
                       "train.ckpt_every": 6, **kw})


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_checks_on_the_device_train_exactly_as_checking_every_step(tmp_path, optimizer):
    every = fit.train(_cfg(tmp_path, "a", **{"train.optimizer": optimizer}))
    trainer = loop.Trainer(_cfg(tmp_path, "b", **{"train.optimizer": optimizer, "train.check_every": 5}))
    assert trainer.check_every == 5 and trainer.guard is not None
    reads = []
    real = trainer.guard.read
    trainer.guard.read = lambda: reads.append(trainer.step) or real()
    late = trainer.fit()
    trainer.close()
    assert reads == [5, 6, 10, 12]  # every 5 steps, at the checkpoint at 6, and at the end
    rows = lambda name: [(r["step"], r["loss"], r["grad_norm"]) for r in read_csv(tmp_path / name / "train.csv")]
    assert rows("b") == rows("a") and len(rows("a")) == 12
    assert late["train_loss"] == every["train_loss"] and late["val_loss"] == every["val_loss"]
    a, b = (checkpoint.load(tmp_path / n).group("model") for n in "ab")
    assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("where", ["loss", "norm"])
def test_a_failed_step_is_skipped_on_the_device_and_named_at_the_next_read(tmp_path, monkeypatch, optimizer, where):
    def nan_gradient(value, model):  # finite forward, NaN backward: where's untaken branch gets 0 x inf
        x = next(model.parameters()).sum()
        return value + torch.where(torch.tensor(False), torch.sqrt(-x.abs() - 1), 0 * x)

    poison_loss(monkeypatch, 3, nan_loss if where == "loss" else nan_gradient)  # step 3
    trainer = loop.Trainer(_cfg(tmp_path, "run", **{"train.optimizer": optimizer, "train.check_every": 5,
                                                    "train.ckpt_every": None}))
    before = weights_after(trainer, 2)
    what = r"non-finite loss \(nan\)" if where == "loss" else r"non-finite gradient norm \(nan\) with finite loss [0-9.]+"
    with pytest.raises(loop.NonFiniteLoss, match=what + r" at step 3; stopped before the optimiser step"):
        trainer.fit()
    assert trainer.step == 5  # steps 4 and 5 ran and were skipped too
    after = trainer.model.state_dict()
    assert before and all(torch.equal(before[k], after[k]) for k in before)
    assert [int(r["step"]) for r in read_csv(tmp_path / "run" / "train.csv")] == [1, 2]


def test_guard_records_the_first_failure_only():
    g = guard.Guard(torch.device("cpu"))
    one = torch.tensor(1.0)
    g.note(1, guard.LOSS, torch.tensor(False), one)
    assert g.read() is None
    g.note(2, guard.NORM, torch.tensor(True), one, torch.tensor(float("inf")))
    g.note(3, guard.LOSS, torch.tensor(True), torch.tensor(float("nan")))
    assert g.read() == (2, guard.NORM, 1.0, float("inf"))


def test_check_every_is_refused_where_a_step_cannot_be_skipped_on_the_device(tmp_path):
    with pytest.raises(ValueError, match=r"train.check_every=4 .*train.fused=false\); use train.check_every=1"):
        loop.Trainer(_cfg(tmp_path, "x", **{"train.check_every": 4, "train.fused": False}))
    with pytest.raises(ValueError, match="train.check_every must be an integer >= 1"):
        load(None, {**TINY, "train.check_every": 0})
    t = loop.Trainer(_cfg(tmp_path, "y"))
    assert t.check_every == 1 and t.guard is None  # auto on a CPU: every step


def test_weights_an_update_made_non_finite_stop_the_run_before_any_save(tmp_path):
    """An lr beyond fp32's range: finite loss and gradient norm, non-finite weights after step 1."""
    trainer = loop.Trainer(_cfg(tmp_path, "run", **{"train.lr": 1e39, "train.warmup": 0, "train.check_every": 4,
                                                    "train.ckpt_every": 2}))
    with pytest.raises(loop.NonFiniteLoss, match=r"non-finite weights after the optimiser step \(loss [0-9.]+, "
                                                 r"gradient norm [0-9.]+\) at step 1; stopped before saving them"):
        trainer.fit()
    assert trainer.step == 2 and not checkpoint.step_dirs(tmp_path / "run" / "checkpoints")
