"""scripts/kernel_time_split.py and the kernel_time_split op it reads: the split is gathered only
while switched on, its parts are parts of the whole, and the script's rows carry the target."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tfamily.nn.kernels import KERNELS, native
from tfamily.nn.patterns.examples import examples

SCRIPTS = Path(__file__).parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # the script imports ab_common from its own directory
spec = importlib.util.spec_from_file_location("kernel_time_split", SCRIPTS / "kernel_time_split.py")
split = importlib.util.module_from_spec(spec)
spec.loader.exec_module(split)

ops = native.ops()
pytestmark = pytest.mark.skipif(ops is None, reason="the compiled kernels are not built here")


def _call(pattern: str, L: int = 256):
    q, k, v = (torch.randn(1, 2, L, 16, requires_grad=True) for _ in range(3))
    out = KERNELS["blocksparse"](block_size=32)(q, k, v, pattern=examples(L)[pattern])[0]
    out.sum().backward()


def test_the_split_gathers_only_while_it_is_on():
    ops.kernel_time_split(False)  # drop anything gathered before
    _call("sliding_window")
    assert all(x == 0 for x in ops.kernel_time_split(True))  # off: nothing gathered
    _call("sliding_window")
    on = ops.kernel_time_split(False)
    assert len(on) == 3 + len(split.SECTIONS)
    busy, gemm, calls, sections = on[0], on[1], on[2], on[3:]
    assert busy > 0 and 0 < gemm < busy and calls > 0
    assert all(s >= 0 for s in sections) and gemm + sum(sections) <= busy * 1.05
    # forward and backward stretches were both seen
    names = dict(zip(split.SECTIONS, sections))
    assert names["fwd.softmax"] > 0 and names["bwd.exp"] > 0
    _call("sliding_window")
    assert all(x == 0 for x in ops.kernel_time_split(False))  # switched off by the last read


def test_the_script_writes_a_row_per_pattern_with_the_target(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert split.main([str(out), "sliding_window", "strided_heads", "--seq-len", "512", "--rounds", "1",
                       "--threads", "1"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["pattern"] for r in rows] == ["sliding_window", "strided_heads"]
    for r in rows:
        assert 0 < r["gemm_ms"] <= r["loops_ms"] and r["gemm_calls"] > 0
        assert sum(r["sections_ms"].values()) <= r["loops_ms"] - r["gemm_ms"] + 0.5
        assert r["target_ms"] == pytest.approx(1.5 * r["causal_density"] * r["sdpa_ms"], rel=0.01, abs=0.1)
        assert r["gemm_alone_ms"] == pytest.approx(r["gemm_ms"], abs=0.1)  # one thread
    assert "GEMMs alone" in capsys.readouterr().out


def test_the_script_names_unknown_patterns(tmp_path):
    with pytest.raises(SystemExit, match="unknown pattern"):
        split.main([str(tmp_path / "x.json"), "no_such_pattern", "--seq-len", "512", "--no-sdpa"])
