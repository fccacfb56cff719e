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
    assert fused.usable(q, Causal(), None) is not None
    assert fused.usable(q, Full(), None) is not None
    assert fused.usable(q, Causal(), torch.zeros(1, 1, 8, 8)) is None    # an additive bias
    assert fused.usable(q, SlidingWindow(4), None) is None               # another pattern
    assert fused.usable(q.half(), Causal(), None) is None                # half precision


def test_half_chunk_tiles_only_for_windows_that_end_at_their_query():
    assert fused.tile_rows(64, causal_windows=True) == 32
    assert fused.tile_rows(64, causal_windows=False) == 64
    assert fused.tile_rows(15, causal_windows=True) == 15


def _dropout_call(q, v, kernel, p, seed, pattern=Causal()):
    torch.manual_seed(seed)  # rotations and the dropout seed both come from torch's generator
    return kernel(q, F.normalize(q, dim=-1), v, pattern=pattern, dropout_p=p)[0]


@pytest.mark.parametrize("rounds,keep", [(1, True), (3, True), (2, False)])
def test_dropout_gradients_match_finite_differences(monkeypatch, rounds, keep):
    """With the seed fixed the dropped call is a deterministic function: its backward must be the
    derivative of its forward (the masks are redrawn, not stored)."""
    if not keep:
        monkeypatch.setattr(fused, "KEEP_PROBS", 0)
    gen = torch.Generator().manual_seed(rounds)
    q = torch.randn(1, 1, 24, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(1, 1, 24, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    kernel = LSHKernel(n_hashes=rounds, bucket_size=4)
    assert torch.autograd.gradcheck(lambda a, b: _dropout_call(a, b, kernel, 0.3, 11), (q, v), eps=1e-6, atol=1e-5)


def test_dropout_is_seeded_unbiased_and_drops_its_share():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 128, 16, dtype=torch.float64, generator=gen)
    v = torch.randn(1, 2, 128, 16, dtype=torch.float64, generator=gen)
    kernel = LSHKernel(n_hashes=2, bucket_size=16)
    plain = _dropout_call(q, v, kernel, 0.0, 5)
    a, b = _dropout_call(q, v, kernel, 0.25, 5), _dropout_call(q, v, kernel, 0.25, 5)
    assert torch.equal(a, b)                                    # same generator state, same masks
    assert not torch.equal(a, plain)                            # and it does drop
    # The rotations are fixed by the seed; vary only the dropout seed and average: E[out] = plain.
    torch.manual_seed(5)
    lay_state = torch.get_rng_state()
    outs = []
    for i in range(300):
        torch.set_rng_state(lay_state)
        outs.append(_dropout_mean_call(q, v, kernel, 0.25, i))
    mean = torch.stack(outs).mean(0)
    err = (mean - plain).abs().mean() / plain.abs().mean()
    assert err < 0.05, f"dropout is biased: mean relative error {err:.3f}"
    # A value vector of ones gives each row the sum of its kept weights: about (1 - p) / (1 - p) = 1
    # on average, and exactly 0 or 1/(1-p) multiples per key, so its spread shows the drop rate.
    ones = torch.ones_like(v)
    row_sums = torch.stack([_dropout_call(q, ones, kernel, 0.25, 100 + i)[..., 0] for i in range(50)])
    assert abs(row_sums.mean().item() - 1.0) < 0.02


def _dropout_mean_call(q, v, kernel, p, dropout_seed):
    """The kernel with fixed rotations (generator state set by the caller) and a dropout seed drawn
    from a separate generator state."""
    real = torch.randint
    calls = {"n": 0}

    def seeded(*args, **kwargs):  # the dropout seed is the kernel's only randint call
        calls["n"] += 1
        return torch.tensor(1_000_003 * (dropout_seed + 1))

    torch.randint = seeded
    try:
        out = kernel(q, F.normalize(q, dim=-1), v, pattern=Causal(), dropout_p=p)[0]
    finally:
        torch.randint = real
    assert calls["n"] == 1
    return out
