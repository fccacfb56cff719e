"""The compiled LSH tile kernel (lsh/fused.py, csrc/lsh_chunks.cpp) against the PyTorch path of
chunks.py, which is tested against the dense definitions in test_lsh.py: equal outputs and
gradients on fresh random inputs, over rounds, lengths that are not multiples of the chunk,
key padding, both window kinds, both tile sizes, kept and recomputed probabilities."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfamily.nn.kernels import native
from tfamily.nn.kernels.lsh import LSHKernel
from tfamily.nn.kernels.lsh import fused
from tfamily.nn.patterns import Causal, Full, SlidingWindow

pytestmark = pytest.mark.skipif(native.ops() is None, reason="compiled kernels unavailable (no compiler)")


def _run(monkeypatch, compiled: bool, q, v, kernel, pattern, padding, seed):
    monkeypatch.setenv("TFAMILY_NATIVE", "1" if compiled else "0")
    calls = []
    real = fused.FusedLSHFunction.apply
    monkeypatch.setattr(fused.FusedLSHFunction, "apply", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(seed)  # the same rotations for both paths
    out, _ = kernel(q, F.normalize(q, dim=-1), v, pattern=pattern, key_padding=padding)
    assert len(calls) == int(compiled), "the call did not take the path under test"
    g = torch.randn_like(out, generator=torch.Generator().manual_seed(seed + 1))
    dq, dv = torch.autograd.grad(out, (q, v), g)
    return out, dq, dv


CASES = [  # (length, rounds, pattern, same_bucket_only, bucket_size)
    (256, 1, Causal(), True, 16), (301, 3, Causal(), True, 16), (200, 2, Full(), True, 16),
    (256, 2, Causal(), False, 16), (64, 2, Full(), False, 16), (96, 4, Causal(), True, 32),
    (40, 2, Causal(), True, 64),  # one chunk: the window is the chunk itself
]


@pytest.mark.parametrize("keep", [True, False], ids=["kept-probs", "recomputed"])
@pytest.mark.parametrize("L,rounds,pattern,own_bucket,bucket", CASES)
def test_compiled_path_equals_the_pytorch_path(monkeypatch, keep, L, rounds, pattern, own_bucket, bucket):
    if not keep:
        monkeypatch.setattr(fused, "KEEP_PROBS", 0)
    for seed in range(3):
        gen = torch.Generator().manual_seed(100 * seed + L)
        q = torch.randn(2, 3, L, 16, dtype=torch.float64, generator=gen, requires_grad=True)
        v = torch.randn(2, 3, L, 16, dtype=torch.float64, generator=gen, requires_grad=True)
        padding = torch.ones(2, L, dtype=torch.bool)
        padding[1, L - L // 5:] = False  # the second row ends in padding
        kernel = LSHKernel(n_hashes=rounds, bucket_size=bucket, same_bucket_only=own_bucket)
        got = _run(monkeypatch, True, q, v, kernel, pattern, padding, seed)
        want = _run(monkeypatch, False, q, v, kernel, pattern, padding, seed)
        for a, b, name in zip(got, want, ("output", "dq", "dv")):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name}: {m}")


def test_float32_agrees_within_rounding(monkeypatch):
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 4, 512, 32, generator=gen, requires_grad=True)
    v = torch.randn(1, 4, 512, 32, generator=gen, requires_grad=True)
    kernel = LSHKernel(n_hashes=2, bucket_size=32)
    got = _run(monkeypatch, True, q, v, kernel, Causal(), None, 3)
    want = _run(monkeypatch, False, q, v, kernel, Causal(), None, 3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_compiled_path_serves_only_what_it_can_mask():
    q = torch.randn(1, 1, 8, 4)
    assert fused.usable(q, Causal(), None, 0.0) is not None
    assert fused.usable(q, Full(), None, 0.0) is not None
    assert fused.usable(q, Causal(), None, 0.1) is None                       # dropout
    assert fused.usable(q, Causal(), torch.zeros(1, 1, 8, 8), 0.0) is None    # an additive bias
    assert fused.usable(q, SlidingWindow(4), None, 0.0) is None               # another pattern
    assert fused.usable(q.half(), Causal(), None, 0.0) is None                # half precision


def test_half_chunk_tiles_only_for_windows_that_end_at_their_query():
    assert fused.tile_rows(64, causal_windows=True) == 32
    assert fused.tile_rows(64, causal_windows=False) == 64
    assert fused.tile_rows(15, causal_windows=True) == 15
