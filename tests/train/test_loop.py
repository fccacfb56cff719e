"""The trainer in process: learning, logs, non-finite stop, accumulation, activation
checkpointing, time budget, synthetic tasks and carried (Transformer-XL) state."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.state import SegmentMemory
from tfamily.train import autotune, checkpoint, fit, loop
from tfamily.train.config import load
from tfamily.train.metrics import read_csv

TINY = {"member": "gpt", "model.d_model": 32, "model.heads.n_heads": 2, "model.depth.n_layers": 2,
        "model.position.max_len": 32, "model.dropout": 0.0, "data.seq_len": 32, "train.batch_size": 8,
        "train.max_steps": 6, "train.log_every": 1, "train.eval_every": None, "train.eval_tokens": 1024,
        "train.ckpt_every": None, "train.warmup": 2, "train.lr": 3e-3, "train.precision": "fp32",
        "train.progress": False, "train.tensorboard": False}


def cfg(tmp_path, **kw):
    return load(None, {**TINY, "train.out": str(tmp_path / "run"), **{k.replace("__", "."): v for k, v in kw.items()}})


def test_trains_logs_and_reports(tmp_path):
    r = fit.train(cfg(tmp_path, train__max_steps=30, train__eval_every=15, train__ckpt_every=15,
                       train__tensorboard=True))
    run = tmp_path / "run"
    for key in ("member", "params", "steps", "tokens", "wall_s", "tokens_per_s", "train_loss", "val_loss", "val_bpc"):
        assert r[key] is not None, key
    assert r["steps"] == 30 and r["tokens"] == 30 * 8 * 32 and r["stopped"] == "max_steps"
    assert r["val_bpc"] == pytest.approx(r["val_loss"] / math.log(2))
    losses = [float(row["loss"]) for row in read_csv(run / "train.csv")]
    assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5])
    assert [int(row["step"]) for row in read_csv(run / "eval.csv")] == [15, 30]
    assert [c["step"] for c in r["curve"]] == [15, 30] and r["curve"][-1]["val_bpc"] == r["val_bpc"]
    assert 0 < r["curve"][0]["train_s"] < r["curve"][1]["train_s"] <= r["train_s"]
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert [s for s, _ in checkpoint.step_dirs(run / "checkpoints")] == [30, 15]
    assert (run / "config.yaml").is_file() and (run / "result.json").is_file()
    with pytest.raises(ValueError, match="already has checkpoints; continue it with --resume"):
        fit.train(cfg(tmp_path))


def nan_loss(value, model):
    return value * float("nan")


def poison_loss(monkeypatch, at: int, spoil=nan_loss) -> None:
    """Every model ``loop`` builds returns ``spoil(loss, model)`` (default: NaN) from its ``at``-th loss call."""
    real_build = loop.build

    def poisoned(spec):
        model = real_build(spec)
        real_loss, calls = model.loss, [0]

        def loss(batch):
            calls[0] += 1
            value, metrics = real_loss(batch)
            return (spoil(value, model) if calls[0] == at else value), metrics
        model.loss = loss
        return model
    monkeypatch.setattr(loop, "build", poisoned)


def weights_after(trainer, step: int) -> dict:
    """Filled with the trainer's weights after ``step``, as the next step begins its update."""
    kept = {}

    def keep(opt, args, kwargs):
        if trainer.step == step:
            kept.update({n: t.detach().clone() for n, t in trainer.model.state_dict().items()})
    trainer.optimizer.register_step_pre_hook(keep)
    return kept


def test_non_finite_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    poison_loss(monkeypatch, 5)
    c = cfg(tmp_path, train__ckpt_every=2)
    trainer = loop.Trainer(c)
    with pytest.raises(loop.NonFiniteLoss, match=r"non-finite loss \(nan\) at step 5.*step-00000004"):
        trainer.fit()
    ckdir = tmp_path / "run" / "checkpoints"
    assert [s for s, _ in checkpoint.step_dirs(ckdir)] == [4, 2]
    assert checkpoint.read_meta(ckdir / "step-00000004")["step"] == 4  # intact and loadable
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())  # never updated with NaN


class _Fixed:
    """A task that always yields the same rows, split into micro-batches."""

    kind, unit, vocab, carries_state = "text", "tokens", None, False

    def __init__(self, x, y, rows):
        self.x, self.y, self.rows, self.i = x, y, rows, 0

    def next(self):
        sl = slice(self.i * self.rows, (self.i + 1) * self.rows)
        self.i = (self.i + 1) % (len(self.x) // self.rows)
        return {"x": self.x[sl], "y": self.y[sl]}

    def size(self, batch):
        return batch["x"].numel()


def test_accumulation_equals_one_big_batch(tmp_path):
    torch.manual_seed(0)
    x = torch.randint(0, 65, (8, 32))
    y = torch.randint(0, 65, (8, 32))
    runs = []
    for batch, accum, name in ((8, 1, "a"), (4, 2, "b")):
        t = loop.Trainer(load(None, {**TINY, "train.out": str(tmp_path / name), "train.batch_size": batch,
                                     "train.accum": accum, "train.grad_clip": None}))
        t.task = _Fixed(x, y, batch)
        grads = []
        t.optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: grads.append([p.grad.clone() for p in t.model.parameters()]))
        loss, norm, tokens = t.train_step()
        runs.append((loss, norm, tokens, grads[0]))
    (la, na, ta, ga), (lb, nb, tb, gb) = runs
    assert ta == tb == 8 * 32
    assert lb == pytest.approx(la, rel=1e-6) and nb == pytest.approx(na, rel=1e-5)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_activation_checkpointing_changes_memory_not_results(tmp_path):
    a = fit.train(cfg(tmp_path, train__out=str(tmp_path / "a")))
    b = fit.train(cfg(tmp_path, train__out=str(tmp_path / "b"), train__activation_checkpointing=True))
    assert checkpoint.load(tmp_path / "b").meta["spec"]["depth"]["checkpointing"] is True
    la = [float(r["loss"]) for r in read_csv(tmp_path / "a" / "train.csv")]
    lb = [float(r["loss"]) for r in read_csv(tmp_path / "b" / "train.csv")]
    assert lb == pytest.approx(la, rel=1e-6) and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6)


def test_time_budget_stops_the_run_and_moves_the_schedule(tmp_path):
    r = fit.train(cfg(tmp_path, train__max_steps=None, train__time_budget="2s", train__warmup=0))
    assert r["stopped"] == "time_budget" and r["train_s"] < 4
    meta = checkpoint.load(tmp_path / "run").meta
    total = meta["scheduler"]["lr_lambdas"][0]["total"]
    assert total < 10**5  # re-estimated from the measured step rate, not the placeholder
    lrs = [float(row["lr"]) for row in read_csv(tmp_path / "run" / "train.csv")]
    assert len(lrs) < 3 or lrs[-1] < lrs[1]  # the cosine decays within the budget


def test_synthetic_task_learns_and_reports_accuracy(tmp_path):
    r = fit.train(load(None, {**TINY, "train.out": str(tmp_path / "run"), "data.corpus": None, "data.task": "copy",
                               "data.task_params": {"n_symbols": 4, "max_len": 6}, "train.batch_size": 16,
                               "train.lr": 1e-2, "train.warmup": 5, "train.max_steps": 80}))
    assert r["val_bpc"] is None  # not text
    assert r["val_acc"] > 0.5  # chance is 1/4 on the scored (copied) positions
    meta = checkpoint.load(tmp_path / "run").meta
    assert meta["data"] == {"type": "task", "task": "copy", "seed": 0, "step": 80, "global_batch": 16}


def test_bf16_autocast_trains(tmp_path):
    r = fit.train(cfg(tmp_path, train__precision="bf16", train__max_steps=3))
    assert r["precision"] == "bf16" and math.isfinite(r["val_loss"])


# Constant learning rate: stopping at 4 steps and extending to 8 follows the same schedule as 8 at once.
XL = {"model.position.name": "sinusoidal", "model.state": {"name": "xl_memory", "mem_len": 16},
      "data.stream": True, "data.seq_len": 16, "model.dropout": 0.1, "train.max_steps": 8, "train.ckpt_every": 4,
      "train.warmup": 0, "train.min_lr_ratio": 1.0}


def test_stream_mode_carries_memory_and_resumes_it_exactly(tmp_path, monkeypatch):
    full = loop.Trainer(load(None, {**TINY, **XL, "train.out": str(tmp_path / "full")}))
    assert isinstance(full.state, SegmentMemory)
    full.fit()
    assert full.state.memory_lengths == [16, 16] and full.state.offset == 8 * 16
    meta = checkpoint.load(tmp_path / "full").meta
    assert meta["carry"] == {"values": {"offset": 128, "mem_len": 16}} and meta["data"]["type"] == "StreamBatches"

    part = loop.Trainer(load(None, {**TINY, **XL, "train.out": str(tmp_path / "part"), "train.max_steps": 4}))
    part.fit()
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load must never be used"))
    resumed = loop.Trainer(fit.resume_config(tmp_path / "part", {"train.max_steps": 8}), resume=tmp_path / "part")
    assert resumed.step == 4 and resumed.state.offset == 64
    resumed.fit()
    curve = lambda run: [(r["step"], r["loss"]) for r in read_csv(tmp_path / run / "train.csv")]  # noqa: E731
    assert curve("part") == curve("full")


def test_stream_without_a_memory_model_carries_nothing(tmp_path):
    t = loop.Trainer(cfg(tmp_path, data__stream=True))
    assert t.state is None  # a KV cache is decoding state, never carried in training
    assert t.fit()["steps"] == 6


def test_spec_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"model.position.max_len=32 is shorter than the sequence length 64"):
        loop.Trainer(cfg(tmp_path, data__seq_len=64))
    with pytest.raises(ValueError, match="unknown member 'gtp'"):
        loop.Trainer(cfg(tmp_path, member="gtp"))
    with pytest.raises(ValueError, match=r"unknown heads keys \['n_kv'\]"):
        loop.Trainer(cfg(tmp_path, model__heads__n_kv=2))


@pytest.mark.slow
def test_compiled_loss_trains_like_eager(tmp_path):
    eager = fit.train(cfg(tmp_path, train__out=str(tmp_path / "eager"), train__max_steps=3))
    compiled = fit.train(cfg(tmp_path, train__out=str(tmp_path / "compiled"), train__max_steps=3,
                              train__compile=True))
    la = [float(r["loss"]) for r in read_csv(tmp_path / "eager" / "train.csv")]
    lb = [float(r["loss"]) for r in read_csv(tmp_path / "compiled" / "train.csv")]
    assert lb == pytest.approx(la, rel=1e-4) and compiled["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-4)
    # The compiling first step is reported apart, not as training time.
    assert eager["compile_s"] is None and compiled["compile_s"] > compiled["train_s"]


def test_auto_threads_times_both_and_leaves_training_state_alone(tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        t = loop.Trainer(cfg(tmp_path, model__dropout=0.1, train__threads="auto"))  # which may have set 1
        torch.set_num_threads(2)
        rng, position = torch.get_rng_state(), t.task.state_dict()
        t._autotune(threads=True, precision=False)
        rates = t.thread_rates
        assert set(rates) == {1, 2} and all(r > 0 for r in rates.values())
        assert torch.get_num_threads() == (2 if rates[2] >= autotune.GAIN * rates[1] else 1)
        assert torch.equal(torch.get_rng_state(), rng) and t.task.state_dict() == position
        assert t.precision_rates is None and t.precision == "fp32"
    finally:
        torch.set_num_threads(before)
    with pytest.raises((TypeError, ValueError),
                       match="train.threads must be an integer >= 1 or null, got 'many'; or 'auto'"):
        cfg(tmp_path, train__threads="many")


def _native_bf16(monkeypatch):
    from tfamily.train import device
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: True)


def test_auto_precision_on_a_bf16_cpu_times_both_and_keeps_the_faster(tmp_path, monkeypatch):
    _native_bf16(monkeypatch)   # bf16 is emulated on some CI CPUs: the timing still decides
    probe = loop.Trainer._measure
    seen = []

    def spy(self, settings, budget_s=None):
        rates = probe(self, settings)  # without the time limit, so it always times both
        seen.append(rates)
        return rates
    monkeypatch.setattr(loop.Trainer, "_measure", spy)
    t = loop.Trainer(cfg(tmp_path, train__precision="auto", train__threads=1))
    assert set(t.precision_rates) == {"fp32", "bf16"} and all(r > 0 for r in t.precision_rates.values())
    assert t.precision == max(t.precision_rates, key=t.precision_rates.get)
    assert list(seen[0]) == [(1, "fp32"), (1, "bf16")]
    # The probe left the model, RNG and data alone: training equals a run pinned to that precision.
    r = t.fit()
    pinned = fit.train(cfg(tmp_path, train__out=str(tmp_path / "pinned"), train__precision=t.precision,
                            train__threads=1))
    assert r["precision"] == pinned["precision"] == t.precision
    assert r["train_loss"] == pinned["train_loss"]


def test_auto_precision_is_static_off_bf16_cpus_and_kept_on_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(loop.Trainer, "_measure", lambda *a, **k: pytest.fail("nothing to time"))
    from tfamily.train import device
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    assert loop.Trainer(cfg(tmp_path, train__precision="auto", train__threads=1)).precision == "fp32"
    _native_bf16(monkeypatch)
    monkeypatch.setattr(loop.Trainer, "_measure",
                        lambda self, settings, *a: {s: 2.0 if s[1] == "bf16" else 1.0 for s in settings})
    c = cfg(tmp_path, train__out=str(tmp_path / "b"), train__precision="auto", train__threads=1,
            train__max_steps=2, train__ckpt_every=2)
    first = loop.Trainer(c)
    assert first.precision == "bf16"
    first.fit()
    assert checkpoint.load(tmp_path / "b").meta["precision"] == "bf16"
    # Timing now favours fp32, but a resumed run continues in the precision it ran in.
    monkeypatch.setattr(loop.Trainer, "_measure", lambda *a, **k: pytest.fail("a resumed run is not re-timed"))
    resumed = loop.Trainer(fit.resume_config(tmp_path / "b", {"train.max_steps": 4}), resume=tmp_path / "b")
    assert resumed.precision == "bf16"


class _Rollouts:
    """A stand-in for an RL rollout task: batches of observations and returns (no tokens,
    no "x"), sized in environment steps."""

    name, kind, unit, vocab, vocab_size, seq_len, carries_state = "bandit", "rl", "steps", None, 0, 1, False

    def __init__(self):
        self.step = 0

    def next(self):
        g = torch.Generator().manual_seed(self.step)
        self.step += 1
        obs = torch.randn(6, 3, generator=g)
        return {"obs": obs, "ret": obs.sum(-1, keepdim=True)}

    def size(self, batch):
        return batch["obs"].shape[0]

    def carry(self, state):
        pass

    def eval_batches(self, max_units, batch_size):
        yield self.next()

    def eval_size(self, max_units):
        return 6

    def eval_metrics(self, loss):
        return {}

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = state["step"]


class _Critic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.v = torch.nn.Linear(3, 1)

    def loss(self, batch):
        err = (self.v(batch["obs"]) - batch["ret"]).pow(2).mean()
        return err, {"tokens": batch["obs"].shape[0]}


def test_the_loop_drives_any_task_counting_its_unit(tmp_path):
    # The loop never looks inside a batch: a rollout-like task with its own keys and unit trains.
    from tfamily.train.task import Task
    task = _Rollouts()
    assert isinstance(task, Task)
    t = loop.Trainer(cfg(tmp_path, train__max_steps=40, train__lr=5e-2, train__warmup=0), task=task, model=_Critic())
    r = t.fit()
    assert r["unit"] == "steps" and r["tokens"] == 40 * 6 and r["val_bpc"] is None
    assert r["val_loss"] < 0.5 * float(read_csv(tmp_path / "run" / "train.csv")[0]["loss"])
