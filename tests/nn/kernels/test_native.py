"""Building and loading the compiled kernels, and the fallback without a compiler."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tfamily.nn.kernels import native
from tfamily.nn.kernels.lsh import LSHKernel
from tfamily.nn.patterns import Causal


def test_no_compiler_gives_one_line_and_the_pytorch_path(monkeypatch, capsys):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    assert native.ops() is None
    assert native.ops() is None  # decided once per process
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no C++ compiler" in err[0] and "PyTorch paths" in err[0]
    q = torch.randn(1, 2, 64, 8, requires_grad=True)
    out, _ = LSHKernel(bucket_size=16)(q, F.normalize(q, dim=-1), q, pattern=Causal())
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("TFAMILY_NATIVE", "0")
    assert native.ops() is None


def test_the_build_directory_depends_on_sources_torch_and_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("TFAMILY_CACHE", str(tmp_path))
    a = native.build_dir()
    assert a.parent == tmp_path / "native"
    monkeypatch.setattr(native, "_cpu_flags", lambda: "avx2 fma")
    b = native.build_dir()
    monkeypatch.setattr(native, "_cpu_flags", lambda: "avx2 avx512f amx_tile fma")
    assert native.build_dir() != b and a != b


def test_each_checkout_has_its_own_build_directory(monkeypatch, tmp_path):
    # ninja's file names the sources by path: a directory shared by two checkouts was rebuilt
    # whenever a process of the other one started.
    monkeypatch.setenv("TFAMILY_CACHE", str(tmp_path))
    here = native.build_dir()
    copy = tmp_path / "other" / "csrc"
    copy.mkdir(parents=True)
    for src in native._SOURCES + native._HEADERS:
        (copy / src.name).write_bytes(src.read_bytes())
    monkeypatch.setattr(native, "_SOURCES", [copy / s.name for s in native._SOURCES])
    monkeypatch.setattr(native, "_HEADERS", [copy / s.name for s in native._HEADERS])
    assert native.build_dir() != here
