"""The separable-convolution transition equals its definition written as explicit sums over
the window, and the causal one never looks ahead."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.sepconv import SepConvTransition, SeparableConv1d


def _reference(conv: SeparableConv1d, x: torch.Tensor) -> torch.Tensor:
    """out[i] = W_p (sum_k w[:, k] * x[i - left + k]) + b, zero outside the sequence."""
    b, n, d = x.shape
    w = conv.depthwise.weight[:, 0]  # (d, k)
    left = conv.pad[0]
    rows = []
    for i in range(n):
        h = torch.zeros(b, d)
        for k in range(w.shape[1]):
            src = i - left + k
            if 0 <= src < n:
                h = h + w[:, k] * x[:, src]
        rows.append(conv.pointwise(h))
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed,k,n", [(0, 3, 7), (1, 4, 5), (2, 1, 3), (3, 5, 2)])
def test_separable_conv_equals_the_window_sum(causal, seed, k, n):
    torch.manual_seed(seed)
    conv = SeparableConv1d(6, 10, k, causal)
    x = torch.randn(2, n, 6, requires_grad=True)
    out, ref = conv(x), _reference(conv, x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0])


@pytest.mark.parametrize("seed", [0, 1])
def test_causal_transition_never_looks_ahead(seed):
    torch.manual_seed(seed)
    t = SepConvTransition(8, 16, 3, causal=True)
    x = torch.randn(2, 9, 8)
    y = x.clone()
    y[:, 5:] += torch.randn(2, 4, 8)
    torch.testing.assert_close(t(x)[:, :5], t(y)[:, :5])
    assert not torch.allclose(t(x)[:, 5:], t(y)[:, 5:])
    centred = SepConvTransition(8, 16, 3, causal=False)
    assert not torch.allclose(centred(x)[:, 4], centred(y)[:, 4])  # sees position 5


def test_bad_kernel_size_is_refused():
    with pytest.raises(ValueError, match="kernel_size"):
        SeparableConv1d(4, 4, 0, True)
