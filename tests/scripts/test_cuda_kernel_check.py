"""scripts/cuda_kernel_check.py, the GPU equivalence check, dry-run on the CPU (blocksparse only:
CPU FlexAttention has no backward), so the script a GPU lease runs is known to work beforehand."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("cuda_kernel_check",
                                              Path(__file__).parents[2] / "scripts" / "cuda_kernel_check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_every_pattern_passes_forward_and_backward_on_cpu(tmp_path, monkeypatch):
    out = tmp_path / "check.json"
    monkeypatch.setattr(sys, "argv", ["cuda_kernel_check.py", str(out), "--device", "cpu", "--kernels",
                                      "blocksparse", "--length", "96", "--block", "16"])
    with pytest.raises(SystemExit) as stop:
        check.main()
    result = json.loads(out.read_text())
    assert stop.value.code == 0 and result["meta"]["failed"] == 0
    rows = result["rows"]
    assert len(rows) == 3 * len({r["pattern"] for r in rows}) >= 60  # fp32, fp32 with an offset, bf16
    assert all(len(r["rel_err_out_dq_dk_dv_dbias"]) == 5 for r in rows)
