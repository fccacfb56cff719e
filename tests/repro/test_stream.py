"""A reproduction's StreamTask: its position (generator state and step) restores the batches
a run would have seen; ``train.fused`` takes true, false or null only."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from tfamily.repro.stream import StreamTask, loop_config
from tfamily.settings.run import validate


def _task():
    return StreamTask("toy", lambda g: {"x": torch.randn(3, generator=g)}, seed=7, unit="rows",
                      size=lambda b: 3, held_out=lambda: [], eval_units=0)


def test_position_round_trips():
    a = _task()
    a.next()
    saved = a.state_dict()
    want = [a.next()["x"] for _ in range(3)]
    b = _task()
    b.load_state_dict(saved)
    assert b.step == 1 and all(torch.equal(b.next()["x"], w) for w in want)
    with pytest.raises(ValueError, match="seed: saved 8"):
        b.load_state_dict({**saved, "seed": 8})


def test_loop_config_is_the_recipe_and_fused_is_checked(tmp_path):
    cfg = loop_config("toy", tmp_path / "run", steps=5, seconds=None, lr=1e-3, seed=0, batch_size=4, warmup=10)
    t = cfg.train
    assert (t.fused, t.weight_decay, t.min_lr_ratio, t.warmup, t.grad_clip, t.threads) == (False, 0.0, 1.0, 9, 1.0, None)
    with pytest.raises(ValueError, match="train.fused"):
        validate(dataclasses.replace(cfg, train=dataclasses.replace(t, fused="yes")))
