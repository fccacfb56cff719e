"""fp16 with loss scaling (train/device.py ``grad_scaler``), on the CPU: a step whose gradients
overflow is skipped with the weights and AdamW moments untouched and the scale halved; an overflow
that no scale fixes stops the run by name; the scale and the skip count round-trip through a
checkpoint, and a resumed run repeats the uninterrupted one bit for bit; ``auto`` picks fp16 on
a GPU without native bf16."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.train import checkpoint, fit, loop
from tfamily.train.config import load
from tfamily.train.device import resolve_precision
from tfamily.train.metrics import read_csv

# The copy task needs no data files; a constant learning rate makes 3 + 3 steps follow 6 at once.
TINY = {"member": "gpt", "model.d_model": 32, "model.heads.n_heads": 2, "model.depth.n_layers": 2,
        "model.dropout": 0.0, "data.corpus": None, "data.task": "copy",
        "data.task_params": {"n_symbols": 4, "max_len": 6}, "train.batch_size": 8, "train.log_every": 1,
        "train.eval_every": None, "train.eval_tokens": 256, "train.warmup": 0, "train.min_lr_ratio": 1.0,
        "train.lr": 3e-3, "train.precision": "fp16", "train.threads": 1, "train.progress": False,
        "train.tensorboard": False}


def _trainer(tmp_path, out="run", resume=None, **kw):
    if resume is not None:
        return loop.Trainer(fit.resume_config(resume, kw), resume=resume)
    return loop.Trainer(load(None, {**TINY, "train.out": str(tmp_path / out), **kw}))


def _overflow_at(trainer, steps):
    """Make the gradients of the given (1-based) steps infinite, as an fp16 overflow would."""
    def hook(grad):
        return grad * math.inf if trainer.step + 1 in steps else grad
    next(trainer.model.parameters()).register_hook(hook)


def test_auto_picks_fp16_on_a_gpu_without_native_bf16(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_precision("auto", cuda) == "fp16"  # a T4: bf16 only by emulation
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert resolve_precision("auto", cuda) == "bf16"
    assert resolve_precision("fp16", torch.device("cpu")) == "fp16"
    with pytest.raises(ValueError, match=r"train.precision='fp8' is not valid; valid: auto, bf16, fp16, fp32"):
        resolve_precision("fp8", cuda)


def test_an_overflowing_step_is_skipped_and_halves_the_scale(tmp_path):
    t = _trainer(tmp_path)
    assert t.scaler.is_enabled() and not _trainer(tmp_path, "fp32", **{"train.precision": "fp32"}).scaler.is_enabled()
    _overflow_at(t, {2})
    scale = t.scaler.get_scale()
    for step in (1, 2, 3):
        before = [p.detach().clone() for p in t.model.parameters()]
        moments = [s["exp_avg"].clone() for s in t.optimizer.state.values()]
        loss, norm, _ = t.train_step()
        t.step = step
        same = all(torch.equal(a, p) for a, p in zip(before, t.model.parameters()))
        assert math.isfinite(loss)
        if step == 2:
            assert not math.isfinite(norm) and same and t.skipped == 1
            assert all(torch.equal(a, s["exp_avg"]) for a, s in zip(moments, t.optimizer.state.values()))
            assert t.scaler.get_scale() == scale / 2
        else:
            assert math.isfinite(norm) and not same
    assert t.scaler.get_scale() == scale / 2  # one clean step does not grow it back (2000 do)


def test_an_overflow_no_scale_fixes_stops_the_run_by_name(tmp_path):
    t = _trainer(tmp_path, **{"train.max_steps": 30})
    _overflow_at(t, set(range(1, 31)))
    # 2**16 halves to 1 after 16 skipped steps; the 17th overflows unscaled.
    with pytest.raises(loop.NonFiniteLoss, match=r"fp16 gradients overflow even unscaled .* at step 17; .*"
                                                 r"train.precision=fp32"):
        t.fit()
    assert t.skipped == 17


def test_the_scale_round_trips_through_a_checkpoint_and_the_resumed_run_repeats_the_losses(tmp_path):
    full = _trainer(tmp_path, "full", **{"train.max_steps": 6})
    _overflow_at(full, {2})
    assert full.fit()["skipped_steps"] == 1
    part = _trainer(tmp_path, "part", **{"train.max_steps": 3})
    _overflow_at(part, {2})
    part.fit()
    meta = checkpoint.load(tmp_path / "part").meta
    assert meta["skipped"] == 1 and meta["scaler"] == part.scaler.state_dict()
    assert meta["scaler"]["scale"] == 2.0**15
    resumed = _trainer(tmp_path, resume=tmp_path / "part", **{"train.max_steps": 6})
    assert resumed.scaler.state_dict() == meta["scaler"] and resumed.skipped == 1
    assert resumed.fit()["skipped_steps"] == 1
    part_curve, full_curve = ([(r["step"], r["loss"], r["grad_norm"]) for r in read_csv(tmp_path / run / "train.csv")]
                              for run in ("part", "full"))
    assert part_curve == full_curve and len(full_curve) == 6
    assert resumed.scaler.state_dict() == full.scaler.state_dict()
