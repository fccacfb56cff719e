"""The block-sparse kernel's gathers equal ``index_select`` in outputs and gradients."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels.gather import permute, reorder, take


def _grad(fn, src, g):
    src = src.detach().requires_grad_()
    out = fn(src)
    (grad,) = torch.autograd.grad(out, src, g)
    return out, grad


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_take_equals_index_select_with_repeats(seed, dim):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(5, 6, 7, generator=g, dtype=torch.float64)
    idx = torch.randint(0, src.shape[dim], (11,), generator=g)  # repeats: gradients accumulate
    up = torch.randn(*src.shape[:dim], 11, *src.shape[dim + 1:], generator=g, dtype=torch.float64)
    want = _grad(lambda s: s.index_select(dim, idx), src, up)
    got = _grad(lambda s: take(s, dim, idx), src, up)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n", [1, 9, 32])
def test_permute_equals_index_select(seed, n):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    order = torch.randperm(n, generator=g)
    up = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    want = _grad(lambda s: s.index_select(1, order), src, up)
    got = _grad(lambda s: permute(s, 1, order), src, up)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_reorder_with_two_copies_padding_and_a_mask():
    # Two copies of 5 keys laid end to end, each padded to 8 slots by repeating its last entry
    # (padding reads a real entry and gets no gradient); ``mask`` zeroes invalid sources.
    n = 5
    perm_a, perm_b = torch.arange(n), torch.tensor([3, 0, 4, 1, 2])
    idx = torch.cat([perm_a, perm_a[-1:].expand(3), perm_b, perm_b[-1:].expand(3)])
    inv = lambda p: torch.argsort(p)  # noqa: E731
    pieces = ((0, n, inv(perm_a)), (8, n, inv(perm_b)))
    src = torch.randn(n, 4, dtype=torch.float64)
    up = torch.randn(16, 4, dtype=torch.float64)
    valid = torch.tensor([True, True, False, True, True])
    got = _grad(lambda s: reorder(s, 0, idx, pieces, valid), src, up)
    keep = torch.tensor([1.0] * n + [0.0] * 3 + [1.0] * n + [0.0] * 3, dtype=torch.float64)[:, None]
    want_grad = _grad(lambda s: s.index_select(0, idx), src, up * keep)[1] * valid[:, None]
    torch.testing.assert_close(got[0], src.index_select(0, idx))
    torch.testing.assert_close(got[1], want_grad, atol=1e-12, rtol=0)
