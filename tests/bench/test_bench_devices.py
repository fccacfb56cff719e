"""``--device`` of `bench lsh`, `bench reversible` and `bench xl-eval`: accepted on the CPU,
refused in one line without a GPU, and the CUDA meter measures in the order that makes its
figures right (checked with an injected stand-in for ``torch.cuda``, not by faking CUDA)."""
from __future__ import annotations

import importlib

import pytest
import torch

from tfamily import cli
from tfamily.bench import devices
from tfamily.bench import lsh as bench_lsh
from tfamily.bench import reversible as bench_rev
from tfamily.bench.cli import BENCHES as MODULES

BENCHES = ("lsh", "reversible", "xl-eval")


def _args(module, argv):
    p = cli.Parser()  # a renamed option (xl-eval's --train-steps) needs the CLI's parser
    module.add_args(p)
    return p.parse_args(argv)


class _Event:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def record(self):
        self.log.append(f"{self.name}.record")

    def synchronize(self):
        self.log.append(f"{self.name}.synchronize")

    def elapsed_time(self, end):
        return 250.0  # milliseconds, as CUDA events report


class _Cuda:
    """Records what the meter asks of ``torch.cuda``, with an allocator that grows by 3 MiB."""

    def __init__(self):
        self.log, self.events = [], 0

    def Event(self, enable_timing):
        assert enable_timing
        self.events += 1
        return _Event(self.log, "start" if self.events % 2 else "end")

    def synchronize(self, device):
        self.log.append("synchronize")

    def reset_peak_memory_stats(self, device):
        self.log.append("reset")

    def memory_allocated(self, device):
        self.log.append("allocated")
        return 5 * 2 ** 20

    def max_memory_allocated(self, device):
        self.log.append("max_allocated")
        return 8 * 2 ** 20


def test_the_meter_follows_the_device_type():
    assert isinstance(devices.meter(torch.device("cuda")), devices.CudaMeter)
    assert isinstance(devices.meter(torch.device("cuda:1")), devices.CudaMeter)
    assert isinstance(devices.meter(torch.device("cpu")), devices.CpuMeter)


def test_cuda_peak_is_the_allocation_above_the_start_after_a_reset():
    fake = _Cuda()
    m = devices.CudaMeter(torch.device("cuda"), cuda=fake)
    out, mb, exact = m.peak_mb(lambda: fake.log.append("call") or "result")
    assert (out, mb, exact) == ("result", 3.0, True)
    # Queued work finishes before the reset; the peak is read only after the call's kernels ran.
    assert fake.log == ["synchronize", "reset", "allocated", "call", "synchronize", "max_allocated"]


def test_cuda_time_is_between_events_around_the_call():
    fake = _Cuda()
    m = devices.CudaMeter(torch.device("cuda"), cuda=fake)
    out, seconds = m.seconds(lambda: fake.log.append("call") or 7)
    assert (out, seconds) == (7, 0.25)
    assert fake.log == ["synchronize", "start.record", "call", "end.record", "end.synchronize"]


def test_cpu_meter_times_and_sees_allocations():
    m = devices.meter(torch.device("cpu"))
    _, mb, _ = m.peak_mb(lambda: torch.ones(32, 2 ** 20).sum())  # 128 MiB, freed after
    assert 100 < mb < 250
    out, seconds = m.seconds(lambda: torch.ones(8).sum().item())
    assert out == 8.0 and seconds > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
@pytest.mark.parametrize("name", BENCHES)
def test_device_cuda_without_a_gpu_is_refused_in_one_line(name, tmp_path, capsys):
    assert cli.main(["bench", name, "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--device cuda" in err and "use --device cpu" in err
    assert not any(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("name", BENCHES)
def test_device_choices(name):
    mod = importlib.import_module(MODULES[name])
    assert _args(mod, []).device == "cpu"
    assert _args(mod, ["--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit):
        _args(mod, ["--device", "tpu"])


def test_workers_run_on_the_cpu_device_and_say_so():
    lsh = _args(bench_lsh, ["--worker", "lsh", "--lengths", "128", "--rounds", "1", "--heads", "2", "--d-head", "8",
                            "--bucket-size", "32", "--repeats", "0", "--device", "cpu"])
    row = bench_lsh._measure(lsh)
    assert row["device"] == "cpu" and row["fwd_bwd_ms"] > 0
    rev = _args(bench_rev, ["--worker", "standard", "--depths", "1", "--seq-len", "16", "--batch", "1",
                            "--d-model", "16", "--heads", "2", "--device", "cpu"])
    row = bench_rev._measure(rev)
    assert row["device"] == "cpu" and row["step_ms"] > 0 and row["activation_mb"] >= 0


def test_xl_eval_rows_carry_device_and_peak(json_rows, tmp_path):
    rows, _ = json_rows(["bench", "xl-eval", "--steps", "0", "--d-model", "16", "--layers", "1", "--heads", "2",
                         "--seg-len", "8", "--mem-len", "8", "--tokens", "32", "--rows", "2", "--device", "cpu",
                         "--out", str(tmp_path)])
    assert [r["mode"] for r in rows] == ["memory", "vanilla"]
    assert all(r["device"] == "cpu" and r["peak_mb"] >= 0 and isinstance(r["peak_exact"], bool) for r in rows)
