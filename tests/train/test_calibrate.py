"""This machine's speed settings: taken once on a quiet machine and kept, so the same command gets
the same threads and precision; a corrupt file is named and taken again; a busy machine keeps no
calibration and a loaded start names train.threads=1; `tfamily calibrate` takes it again. The
timings are replaced by fixed rates, so nothing here depends on what this CPU would pick."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily import cli
from tfamily.train import autotune, calibrate, checkpoint, device, fit, loop
from tfamily.train.config import load

TINY = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
        "model.position.max_len=32", "data.seq_len=32", "train.batch_size=8", "train.eval_tokens=256",
        "train.progress=false", "train.tensorboard=false", "train.warmup=2", "train.ckpt_every=null"]
# The fixed timings: two threads in bf16 fastest, then one thread in bf16.
RATES = {"1/fp32": 1e9, "1/bf16": 1.5e9, "2/fp32": 1.2e9, "2/bf16": 2e9}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A 2-core bf16-native machine at load ``state["load"]`` whose calibration times ``RATES``;
    ``state["taken"]`` counts the calibrations taken."""
    state = {"load": 0.1, "taken": 0}
    monkeypatch.setenv(calibrate.ENV_VAR, str(tmp_path / "speed"))
    monkeypatch.setattr(calibrate, "cores", lambda: 2)
    monkeypatch.setattr(calibrate, "load_average", lambda: state["load"])
    for module in (calibrate, device):
        monkeypatch.setattr(module, "cpu_has_bf16", lambda: True)

    def measure(width, settings):
        state["taken"] += 1
        return {f"{n}/{p}": RATES[f"{n}/{p}"] for n, p in settings}
    monkeypatch.setattr(calibrate, "measure", measure)
    before = torch.get_num_threads()
    yield state
    torch.set_num_threads(before)


def _start(tmp_path, name: str, *extra: str) -> loop.Trainer:
    return loop.Trainer(load(None, [*TINY, "train.max_steps=2", f"train.out={tmp_path / name}", *extra]))


def test_the_same_command_twice_gets_the_same_settings_without_a_probe(machine, tmp_path, monkeypatch, capsys):
    probes = []
    monkeypatch.setattr(autotune, "matmul_rates", lambda counts, *a, **k: probes.append(counts) or
                        {n: 1e9 * (1 + len(probes) % 2 * (n > 1)) for n in counts})  # a probe that flips
    settings = []
    for name in ("a", "b"):
        torch.set_num_threads(1)
        tr = _start(tmp_path, name)
        settings.append((torch.get_num_threads(), tr.precision, tr.speed_from))
        tr.close()
    assert settings[0] == settings[1] == (2, "bf16", {"threads": "calibration", "precision": "calibration"})
    assert machine["taken"] == 1 and probes == []  # taken once, then read; no probe in either run
    first = capsys.readouterr().err.splitlines()
    assert "bf16, 2 threads (threads and precision: this machine's calibration)" in first[0]
    assert "estimated" in first[0] and any("calibrated this machine's speed settings at d 32" in x for x in first)


def test_the_settings_are_recorded_in_the_run(machine, tmp_path):
    result = fit.train(load(None, [*TINY, "train.max_steps=1", "train.precision=fp32",
                                    f"train.out={tmp_path / 'r'}"]))
    assert (result["threads"], result["threads_from"], result["precision"], result["precision_from"]) == \
        (2, "calibration", "fp32", "set")
    assert json.loads((tmp_path / "r" / "result.json").read_text())["threads_from"] == "calibration"
    assert checkpoint.load(tmp_path / "r").meta["threads"] == 2


def test_auto_still_probes_now(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "matmul_rates", lambda counts, *a, **k: {n: 2e9 if n == 1 else 1e9 for n in counts})
    torch.set_num_threads(2)
    tr = _start(tmp_path, "r", "train.threads=auto", "train.precision=fp32")
    assert torch.get_num_threads() == 1 and tr.thread_rates == {1: 2e9, 2: 1e9} and tr.speed_from["threads"] == "probe"
    assert machine["taken"] == 0
    tr.close()


def test_a_corrupt_calibration_is_named_and_taken_again(machine, capsys):
    p = calibrate.path(128)
    p.parent.mkdir(parents=True)
    p.write_text('{"width": 128, "threads": ', encoding="utf-8")
    cal = calibrate.settle(100, notes := [])
    err = capsys.readouterr().err
    assert f"the speed calibration {p} is corrupt" in err and len(err.splitlines()) == 1
    assert cal is not None and machine["taken"] == 1 and (cal.threads, cal.precision) == (2, "bf16")
    assert json.loads(p.read_text())["threads"] == 2 and "calibrated" in notes[0]
    # a file from another machine is as good as corrupt
    p.write_text(json.dumps({**json.loads(p.read_text()), "cpu": "another cpu"}), encoding="utf-8")
    assert calibrate.read(128) is None and not p.exists() and "describes 'another cpu'" in capsys.readouterr().err


def test_a_busy_machine_keeps_no_calibration_and_a_loaded_start_names_one_thread(machine, tmp_path, capsys):
    machine["load"] = 3.0
    tr = _start(tmp_path, "a")
    assert (torch.get_num_threads(), tr.precision, machine["taken"]) == (1, "fp32", 0)
    assert tr.speed_from == {"threads": "conservative", "precision": "conservative"}
    assert not calibrate.path(32).exists()
    tr.close()
    assert "too high to take one: 1 thread, fp32" in capsys.readouterr().err
    machine["load"] = 0.5  # quiet: taken and kept; then busy again, the kept 2 threads are named
    _start(tmp_path, "b").close()
    machine["load"] = 3.0
    capsys.readouterr()
    _start(tmp_path, "c").close()
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: the load average")]
    assert len(notes) == 1 and "3.0 on 2 cores" in notes[0] and "train.threads=1" in notes[0]


def test_the_simplest_setting_wins_unless_another_is_clearly_faster(machine, monkeypatch):
    cal = calibrate.take(256)
    assert (cal.threads, cal.precision) == (2, "bf16") and calibrate.read(256) == cal
    monkeypatch.setattr(calibrate, "measure", lambda w, s: {f"{n}/{p}": 1e9 * (1.03 if n > 1 else 1) for n, p in s})
    assert (calibrate.take(256).threads, calibrate.take(256).precision) == (1, "fp32")
    assert cal.best_precision(1) == "bf16" and cal.rate(8, "fp32") == RATES["2/fp32"]  # nearest count measured
    assert [calibrate.bucket(d) for d in (1, 100, 128, 200, 384, 10**6)] == [32, 128, 128, 256, 512, 4096]


def test_the_calibrate_command_refuses_a_busy_machine_unless_forced(machine, capsys):
    machine["load"] = 2.5
    assert cli.main(["calibrate", "--width", "128"]) == 1
    assert "load average is 2.5 on 2 cores" in capsys.readouterr().err and machine["taken"] == 0
    assert cli.main(["calibrate", "--width", "128", "--width", "300", "--force", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["width"], r["threads"], r["precision"]) for r in rows] == [(128, 2, "bf16"), (256, 2, "bf16")]
    machine["load"] = 0.2
    assert cli.main(["calibrate"]) == 0 and machine["taken"] == 4  # the widths kept, taken again
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["d 128", "d 256"]


def test_the_reference_timing_leaves_threads_and_rng_alone():
    before, rng = torch.get_num_threads(), torch.get_rng_state()
    rates = calibrate.measure(32, [(1, "fp32")])
    assert list(rates) == ["1/fp32"] and rates["1/fp32"] > 0
    assert torch.get_num_threads() == before and torch.equal(torch.get_rng_state(), rng)


def test_the_first_estimate_times_the_model_where_that_is_cheap(machine, tmp_path, monkeypatch):
    from tfamily.train import startup
    asked = []
    monkeypatch.setattr(startup, "measure", lambda tr, settings, budget_s=None: asked.append(settings) or
                        {settings[0]: tr.units_per_step / 0.25})  # the model: 0.25 s a step
    tr = _start(tmp_path, "a")
    assert asked == [[(2, "bf16")]] and tr.step_s == pytest.approx(0.25)
    tr.close()
    monkeypatch.setattr(startup, "ESTIMATE_S", 1e-9)  # too dear to time: the FLOPs at the reference's rate
    tr = _start(tmp_path, "b")
    assert len(asked) == 1 and tr.step_s == pytest.approx(
        startup.flops_per_unit(tr.spec, tr.params, tr.task.seq_len) * tr.units_per_step / RATES["2/bf16"])
    tr.close()


@pytest.mark.parametrize("mem_len", [32, 64])
def test_the_timed_estimate_of_a_memory_member_runs_with_a_full_memory(machine, tmp_path, monkeypatch, mem_len):
    """The probe's step counts the FLOPs of the run's step once its XL memory is full (mem_len + seq_len
    keys), not those of its first step over an empty memory."""
    from torch.utils.flop_counter import FlopCounterMode

    from tfamily.build import build
    probed = []
    monkeypatch.setattr(autotune, "probe", lambda make, batch, *a, **k: probed.append((make(), batch)) or {})
    tr = _start(tmp_path, f"xl{mem_len}", "member=transformer_xl", f"model.state.mem_len={mem_len}")
    model, batch = probed[0]
    tr.close()

    def flops(loss, batch) -> int:
        with FlopCounterMode(display=False) as count:
            loss(batch)
        return count.get_total_flops()
    reference = build(tr.spec)
    state = reference.new_state()
    for _ in range(mem_len // 32):  # the run's steps over a stream of 32-token segments
        reference.loss({**batch, "state": state})
    full = flops(lambda b: reference.loss({**b, "state": state}), batch)
    assert flops(model.loss, batch) == full > flops(build(tr.spec).loss, batch)
