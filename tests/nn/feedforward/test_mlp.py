"""The feed-forward axis: eq. 2 of Vaswani et al. 2017, and chunking along the
sequence, which must change nothing (outputs and gradients)."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.feedforward import MLP, Chunked


def test_mlp_is_equation_2():
    ff = MLP(8, 16, "relu")
    x = torch.randn(2, 5, 8)
    l1, l2 = ff.net[0], ff.net[3]
    torch.testing.assert_close(ff(x), torch.relu(x @ l1.weight.t() + l1.bias) @ l2.weight.t() + l2.bias)


def test_gelu_activation():
    ff = MLP(8, 16, "gelu")
    assert isinstance(ff.net[1], torch.nn.GELU)


@pytest.mark.parametrize("chunks", [2, 3, 7])
def test_chunked_equals_unchunked_in_outputs_and_gradients(chunks):
    ff = MLP(8, 16)
    chunked = Chunked(ff, chunks)
    x1 = torch.randn(2, 7, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    y1, y2 = ff(x1), chunked(x2)
    torch.testing.assert_close(y1, y2)
    y1.square().sum().backward()
    g1 = [p.grad.clone() for p in ff.parameters()]
    ff.zero_grad()
    y2.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    for a, b in zip(g1, (p.grad for p in ff.parameters())):
        torch.testing.assert_close(a, b)


def test_chunks_below_one_is_refused():
    with pytest.raises(ValueError, match="got 0"):
        Chunked(MLP(4, 8), 0)
