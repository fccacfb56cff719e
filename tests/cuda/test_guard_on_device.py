"""The non-finite checks kept on the device (``train/guard.py``) on the device at hand: ``auto``
reads them every ``log_every`` steps on CUDA (every step on a CPU), the run equals one checked every
step, and a NaN loss is skipped on the device and named at the next read with the weights unchanged."""
from __future__ import annotations

import pytest
import torch

from tfamily.train import fit, loop
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

from tests.train.test_loop import poison_loss, weights_after

from .test_checkpoint_on_device import TINY


def _cfg(device, tmp_path, name, **kw):
    return load(None, {**TINY, "member": "gpt", "train.device": device.type, "train.precision": "fp32",
                       "train.max_steps": 8, "train.log_every": 4, "train.out": str(tmp_path / name), **kw})


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_auto_checks_on_the_device_and_trains_as_checking_every_step(device, tmp_path, optimizer):
    auto = loop.Trainer(_cfg(device, tmp_path, "auto", **{"train.optimizer": optimizer}))
    assert auto.check_every == (4 if device.type == "cuda" else 1)
    a = auto.fit()
    auto.close()
    b = fit.train(_cfg(device, tmp_path, "every", **{"train.optimizer": optimizer, "train.check_every": 1}))
    losses = [[float(r["loss"]) for r in read_csv(tmp_path / n / "train.csv")] for n in ("auto", "every")]
    assert len(losses[0]) == 2 and losses[0][-1] < losses[0][0] + 1.0
    torch.testing.assert_close(torch.tensor(losses[0]), torch.tensor(losses[1]), atol=0.0, rtol=1e-6)
    assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)


def test_a_nan_loss_is_skipped_on_the_device_and_named(device, tmp_path, monkeypatch):
    poison_loss(monkeypatch, 3)
    trainer = loop.Trainer(_cfg(device, tmp_path, "run", **{"train.check_every": 4}))
    kept = weights_after(trainer, 2)
    with pytest.raises(loop.NonFiniteLoss, match=r"non-finite loss \(nan\) at step 3"):
        trainer.fit()
    assert trainer.step == 4
    assert all(torch.equal(kept[n], t) for n, t in trainer.model.state_dict().items())
