"""A carried state the trainer has never heard of (a test-only LSTM's h and c) is
checkpointed through the State protocol and resumes bitwise after SIGKILL; the loop
carries it across batches and never touches its fields."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfamily.train import checkpoint, loop
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

from .killing import kill_when_flagged
from .lstm_model import ARGS, LSTMState, TinyLSTM

SCRIPT = Path(__file__).with_name("lstm_model.py")
HOOKED = Path(__file__).parents[1] / "hooked_cli.py"  # the script with the tests' hooks installed


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(*args: str, hooks: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HOOKED), *hooks, "--", str(SCRIPT), *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]


def _curve(run: Path) -> list[tuple[str, str, str]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in read_csv(run / "train.csv")]


def test_the_loop_carries_a_state_it_does_not_know(tmp_path):
    torch.manual_seed(0)
    trainer = loop.Trainer(load(None, [*ARGS, "train.max_steps=3", f"train.out={tmp_path / 'run'}"]),
                           model=TinyLSTM())
    assert isinstance(trainer.state, LSTMState) and trainer.spec is None
    trainer.fit()
    assert trainer.state.offset == 3 * 16 and trainer.state.h.shape == (4, 32)
    carry = checkpoint.load(tmp_path / "run").group("carry")
    assert torch.equal(carry["h.rank0"], trainer.state.h) and torch.equal(carry["c.rank0"], trainer.state.c)


def test_lstm_state_checkpointed_and_resumed_bitwise_after_sigkill(tmp_path):
    ref = tmp_path / "ref"
    _finish(_run(str(ref)))
    run, flag = tmp_path / "run", tmp_path / "halted"
    proc = _run(str(run), hooks=("--halt", "step:6", str(flag)))
    kill_when_flagged(proc, flag, "step 6")
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [4]
    _finish(_run(str(run), "--resume"))
    assert _curve(run) == _curve(ref) and len(_curve(ref)) == 12
    a, b = checkpoint.load(ref), checkpoint.load(run)
    assert a.meta["files"]["model.safetensors"]["sha256"] == b.meta["files"]["model.safetensors"]["sha256"]
    ca, cb = a.group("carry"), b.group("carry")
    assert sorted(ca) == ["c.rank0", "h.rank0"] and all(torch.equal(ca[k], cb[k]) for k in ca)
    assert a.meta["carry"] == b.meta["carry"] == {"values": {"offset": 12 * 16}}


def test_lstm_state_reset_rows_forgets_only_those_rows():
    torch.manual_seed(0)
    model, x = TinyLSTM().eval(), torch.randint(0, 128, (3, 10))
    st = model.new_state()
    model(x[:, :5], st)
    h, c = st.h.clone(), st.c.clone()
    st.reset(torch.tensor([2]))
    assert torch.equal(st.h[:2], h[:2]) and torch.equal(st.c[:2], c[:2]) and not st.h[2].any()
    out = model(x[:, 5:], st)
    torch.testing.assert_close(out[2:], model(x[2:, 5:]), atol=1e-6, rtol=1e-6)


def test_a_run_of_a_model_outside_the_family_is_not_loaded_by_name(tmp_path):
    from tfamily.train.sample import load_trained
    torch.manual_seed(0)
    trainer = loop.Trainer(load(None, [*ARGS, "train.max_steps=1", f"train.out={tmp_path / 'run'}"]),
                           model=TinyLSTM())
    trainer.fit()
    with pytest.raises(ValueError, match="built outside the family"):
        load_trained(tmp_path / "run")
    fresh = TinyLSTM()
    checkpoint.load(tmp_path / "run").load_weights(fresh)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trainer.model.state_dict().values()))


def test_an_optimizer_state_that_does_not_fit_refuses_resume_by_name(tmp_path, monkeypatch):
    """A checkpoint whose optimizer groups do not fit the model (e.g. written before the fused QKV
    projection merged two weights into one) says the run cannot resume and that its weights load."""
    torch.manual_seed(0)
    cfg = load(None, [*ARGS, "train.max_steps=2", f"train.out={tmp_path / 'run'}"])
    loop.Trainer(cfg, model=TinyLSTM()).fit()

    def refuse(self, state):
        raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                         "optimizer's group")

    monkeypatch.setattr(torch.optim.Optimizer, "load_state_dict", refuse)
    with pytest.raises(ValueError, match="cannot resume: start a new run from these weights"):
        loop.Trainer(cfg, model=TinyLSTM(), resume=tmp_path / "run")
