"""FSDP (``train.parallel=fsdp``) on gloo CPU processes: two sharded ranks train like one
process with the same global batch, and a checkpoint (the whole state gathered to rank 0, the
same files DDP writes) resumes on another number of ranks with its weights and AdamW moments
bit for bit, continuing the uninterrupted run's losses.

Run as a script under torchrun (``_resume_and_check``), this file resumes a run, compares the
resumed, sharded state gathered back with the checkpoint's files, and trains on:
``torchrun --standalone --nproc_per_node=1 tests/train/test_fsdp.py RUN 14 train.device=cuda``."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfamily.train import checkpoint
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

# 5 evaluation batches: on two ranks one rank is dealt 3, the other 2 (Trainer._level).
# accum=2: the first micro-batch's gradients stay local (distributed.no_sync). A constant
# learning rate, so that stopping at 4 and extending to 14 steps follows one schedule.
ARGS = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=2",
        "model.position.max_len=32", "model.dropout=0.0", "data.seq_len=32", "train.batch_size=4", "train.accum=2",
        "train.max_steps=14", "train.log_every=1", "train.eval_every=null", "train.eval_tokens=640",
        "train.ckpt_every=null", "train.threads=1", "train.precision=fp32", "train.progress=false",
        "train.tensorboard=false", "train.warmup=0", "train.min_lr_ratio=1.0"]
REL = 1e-6


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _launch(nproc: int, *args: str) -> str:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    proc = subprocess.run([*launcher, *args], env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _train(out: Path, nproc: int, *extra: str) -> None:
    cmd = ["-m", "tfamily.cli", "train", *ARGS, f"train.out={out}", "--json", *extra]
    if nproc > 1:
        _launch(nproc, *cmd)
        return
    proc = subprocess.run([sys.executable, *cmd], env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _resume(run: Path, nproc: int, max_steps: int = 14) -> dict:
    """Resume ``run`` on ``nproc`` ranks; what rank 0 found comparing the resumed state with the files."""
    out = _launch(nproc, __file__, str(run), str(max_steps))
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _losses(run: Path, name: str = "train.csv") -> list[float]:
    return [float(r["loss"]) for r in read_csv(run / name)]


def test_parallel_choice_is_checked():
    with pytest.raises(ValueError, match=r"train.parallel='zero'.*valid: ddp, fsdp"):
        load(None, ["train.parallel=zero"])
    with pytest.raises(ValueError, match="muon cannot run with train.parallel=fsdp"):
        load(None, ["train.parallel=fsdp", "train.optimizer=muon"])
    assert load(None, []).train.parallel == "ddp"


def test_one_rank_checkpoint_resumes_on_two_fsdp_ranks_bitwise(tmp_path):
    one, part = tmp_path / "one", tmp_path / "part"
    _train(one, 1)  # a plain process, uninterrupted: the reference
    _train(part, 1, "train.parallel=fsdp", "--steps", "4")  # FSDP over a group of one
    assert _losses(part) == pytest.approx(_losses(one)[:4], rel=REL)
    found = _resume(part, 2)
    assert found == {"world_size": 2, "weights_bitwise": True, "optimizer_bitwise": True, "optimizer_meta": True}
    # Two sharded ranks continue the one-process run: the same losses and final evaluation.
    assert _losses(part)[4:] == pytest.approx(_losses(one)[4:], rel=REL)
    assert _losses(part, "eval.csv")[-1] == pytest.approx(_losses(one, "eval.csv")[-1], rel=REL)
    # The same files as the unsharded run's: the same tensors under the same names.
    a, b = checkpoint.load(one), checkpoint.load(part)
    assert b.meta["world_size"] == 2 and b.meta["step"] == a.meta["step"] == 14
    for group in ("model", "optimizer"):
        x, y = (load_file(str(c.path / f"{group}.safetensors")) for c in (a, b))
        assert sorted(x) == sorted(y)
        assert all(float((x[k].double() - y[k].double()).abs().max()) <= 1e-5 for k in x)


@pytest.mark.slow
def test_two_rank_fsdp_checkpoint_resumes_on_one_rank_and_on_two(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    _train(full, 2, "train.parallel=fsdp")
    _train(part, 2, "train.parallel=fsdp", "--steps", "4")
    again = tmp_path / "again"
    shutil.copytree(part, again)
    found = _resume(part, 1)
    assert found == {"world_size": 1, "weights_bitwise": True, "optimizer_bitwise": True, "optimizer_meta": True}
    assert _losses(part)[4:] == pytest.approx(_losses(full)[4:], rel=REL)
    assert _resume(again, 2)["weights_bitwise"]
    assert _losses(again) == _losses(full)  # same ranks, same order of every sum: bit for bit


def _bytes(tensors: dict) -> dict:
    return {k: v.contiguous().view(-1).view(torch.uint8).numpy().tobytes() for k, v in tensors.items()}


def _resume_and_check(run: str, max_steps: int, *overrides: str) -> None:
    from tfamily.train import distributed, fit, loop
    from tfamily.train.config import parse_overrides
    from tfamily.train.optim import flatten_optimizer

    cfg = fit.resume_config(run, {"train.max_steps": max_steps, **parse_overrides(list(overrides))})
    tr = loop.Trainer(cfg, resume=run)
    ck = tr.ckpt
    weights = distributed.full_weights(tr.model) if tr.dist.fsdp else checkpoint.model_tensors(tr.model)
    state = distributed.optimizer_state(tr.model, tr.optimizer, tr.dist)
    if tr.dist.main:
        opt_t, opt_meta = flatten_optimizer(state)
        print(json.dumps({
            "world_size": tr.dist.world_size,
            "weights_bitwise": _bytes(weights) == _bytes(load_file(str(ck.path / "model.safetensors"))),
            "optimizer_bitwise": _bytes(opt_t) == _bytes(ck.group("optimizer")),
            "optimizer_meta": json.loads(json.dumps(opt_meta)) == ck.meta["optimizer"]}), flush=True)
    try:
        tr.fit()
    except BaseException:
        tr.close(sync=False)
        raise
    tr.close()


if __name__ == "__main__":
    _resume_and_check(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
