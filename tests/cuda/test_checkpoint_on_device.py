"""A training run on the device, stopped at a checkpoint and resumed, repeats the uninterrupted
run: the weights loaded back onto the device equal the saved file bit for bit (cuDNN packs an
LSTM's weights into one buffer on CUDA, so the LSTM member is here too), and the resumed losses
equal the uninterrupted ones, bitwise on the CPU and within 1e-6 relative on CUDA (its kernels
are deterministic in practice, not by contract). In fp16 the loss scale comes back too."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tfamily.train import checkpoint, fit, loop
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

# The copy task needs no data files; a constant learning rate makes 3 + 3 steps follow 6 at once.
TINY = {"model.d_model": 32, "model.heads.n_heads": 2, "model.depth.n_layers": 2, "model.dropout": 0.0,
        "data.corpus": None, "data.task": "copy", "data.task_params": {"n_symbols": 4, "max_len": 6},
        "train.batch_size": 8, "train.log_every": 1, "train.eval_every": None, "train.eval_tokens": 256,
        "train.warmup": 0, "train.min_lr_ratio": 1.0, "train.lr": 3e-3,
        "train.threads": 1, "train.progress": False, "train.tensorboard": False}


def _losses(run) -> list[float]:
    return [float(r["loss"]) for r in read_csv(run / "train.csv")]


@pytest.mark.parametrize("member, precision", [("gpt", "fp32"), ("lstm_lm", "fp32"), ("gpt", "fp16")])
def test_a_resumed_run_loads_its_weights_bitwise_and_repeats_its_losses(member, precision, device, tmp_path):
    def cfg(out: str, steps: int):
        return load(None, {**TINY, "member": member, "train.device": device.type, "train.max_steps": steps,
                           "train.precision": precision, "train.out": str(tmp_path / out)})

    full = fit.train(cfg("full", 6))
    assert full["device"].startswith(device.type) and full["steps"] == 6 and full["precision"] == precision
    fit.train(cfg("part", 3))
    resumed = loop.Trainer(fit.resume_config(tmp_path / "part", {"train.max_steps": 6}), resume=tmp_path / "part")
    assert resumed.step == 3 and next(resumed.model.parameters()).device.type == device.type
    assert (resumed.scaler.state_dict() or None) == checkpoint.load(tmp_path / "part").meta["scaler"]  # fp32: none
    saved = load_file(checkpoint.resolve(tmp_path / "part") / "model.safetensors")
    here = checkpoint.model_tensors(resumed.model)
    assert here.keys() == saved.keys()
    for name, t in here.items():
        assert torch.equal(t.cpu(), saved[name]), name
    resumed.fit()
    got, want = _losses(tmp_path / "part"), _losses(tmp_path / "full")
    assert len(got) == len(want) == 6 and want[-1] < want[0]  # it learns
    if device.type == "cpu":
        assert got == want
    else:
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=0.0, rtol=1e-6)
