"""The separable-convolution transition equals its definition written as explicit sums over
the window, the causal one never looks ahead and, carrying its last inputs in a layer state,
equals one call over the whole sequence; padded inputs are never read."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.feedforward import SepConvTransition, SeparableConv1d
from tfamily.nn.state import LayerState
from tfamily.registry import FEEDFORWARDS


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


@pytest.mark.parametrize("seed,k,pieces", [(0, 3, [1, 1, 2, 3]), (1, 4, [1, 1, 1, 4]), (2, 1, [2, 1, 2]),
                                           (3, 5, [3, 1, 3])])
def test_causal_conv_carrying_its_last_inputs_equals_one_call(seed, k, pieces):
    # Pieces shorter than k - 1 make the carry span several calls; zeros first = left padding.
    torch.manual_seed(seed)
    conv = SeparableConv1d(6, 10, k, causal=True).double()
    x = torch.randn(2, sum(pieces), 6, dtype=torch.float64, requires_grad=True)
    state = LayerState()
    out = torch.cat([conv(c, state=state, key="c") for c in torch.split(x, pieces, dim=1)], dim=1)
    torch.testing.assert_close(out, conv(x))
    carry = state.parts["c"]
    assert carry.shape == (2, k - 1, 6) and not carry.requires_grad
    torch.testing.assert_close(carry, x[:, x.shape[1] - (k - 1):].detach())


def test_transition_carries_each_convolution_apart():
    torch.manual_seed(4)
    t = SepConvTransition(8, 16, 3, causal=True).double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    state = LayerState()
    out = torch.cat([t(x[:, i:i + 1], state=state) for i in range(7)], dim=1)
    torch.testing.assert_close(out, t(x))
    assert set(state.parts) == {"ff.inner", "ff.outer"}
    assert state.parts["ff.inner"].shape == (2, 2, 8) and state.parts["ff.outer"].shape == (2, 2, 16)


@pytest.mark.parametrize("causal", [True, False])
def test_padded_inputs_are_zeroed_before_each_convolution(causal):
    torch.manual_seed(5)
    conv = SeparableConv1d(6, 10, 3, causal)
    x = torch.randn(2, 7, 6)
    pad = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    torch.testing.assert_close(conv(x, padding=pad), _reference(conv, x * pad[..., None]))
    # Real positions never read what pad positions hold, in either convolution of the transition.
    t = SepConvTransition(6, 12, 3, causal=causal, activation="gelu")
    y = x.clone()
    y[1, 4:] = torch.randn(3, 6)
    torch.testing.assert_close(t(x, padding=pad)[:, :4], t(y, padding=pad)[:, :4])
    torch.testing.assert_close(t(x, padding=pad)[0], t(y, padding=pad)[0])
    if not causal:
        assert not torch.allclose(t(x)[1, 3], t(y)[1, 3])  # without the mask position 3 reads position 4


def test_centred_conv_refuses_to_decode_from_a_state():
    t = SepConvTransition(4, 8, 3, causal=False)
    with pytest.raises(ValueError, match="centred .*cannot decode from a cache"):
        t(torch.randn(1, 2, 4), state=LayerState())
    assert t(torch.randn(1, 2, 4)).shape == (1, 2, 4)


def test_registered_as_a_feed_forward_choice():
    ff = FEEDFORWARDS.make("sepconv", {"kernel_size": 5}, d_model=8, d_ff=16, activation="gelu", dropout=0.0,
                           causal=True)
    assert isinstance(ff, SepConvTransition) and isinstance(ff.act, torch.nn.GELU)
    assert ff.inner.causal and ff.inner.depthwise.kernel_size == (5,)
    assert FEEDFORWARDS.valid_params("sepconv") == ("kernel_size",)
    assert not FEEDFORWARDS.make("sepconv", {}, d_model=8, d_ff=16, activation="relu", dropout=0.0,
                                 causal=False).outer.causal
