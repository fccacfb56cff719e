"""The chunked feed-forward (Kitaev et al. 2020, section 3): applying a position-wise part
in pieces along the sequence changes nothing, and with checkpointed pieces the backward
pass holds one piece's d_ff activations instead of all of them."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.feedforward import MLP, Chunked


def _out_and_grads(ff, x, seed=0):
    torch.manual_seed(seed)
    x = x.detach().clone().requires_grad_()
    ff.zero_grad(set_to_none=True)
    y = ff(x)
    (y * torch.sin(torch.arange(y.numel(), dtype=y.dtype)).view_as(y)).sum().backward()
    return [y, x.grad] + [p.grad for p in ff.parameters()]


@pytest.mark.parametrize("checkpoint", [True, False])
@pytest.mark.parametrize("chunks, n", [(4, 16), (3, 16), (5, 3), (1, 9)])
def test_chunked_equals_unchunked(checkpoint, chunks, n):
    ff = MLP(8, 32, "gelu").double()
    x = torch.randn(2, n, 8, dtype=torch.float64)
    got = _out_and_grads(Chunked(ff, chunks, checkpoint=checkpoint), x)
    want = _out_and_grads(ff, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    with torch.no_grad():
        torch.testing.assert_close(Chunked(ff, chunks, checkpoint=checkpoint)(x), ff(x))


def test_checkpointed_pieces_replay_dropout():
    ff = MLP(8, 32, "relu", dropout=0.5).double().train()
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    got = _out_and_grads(Chunked(ff, 3, checkpoint=True), x, seed=4)
    want = _out_and_grads(Chunked(ff, 3, checkpoint=False), x, seed=4)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_checkpointed_pieces_store_no_hidden_activations(saved_numel):
    ff = MLP(8, 64)
    x = torch.randn(2, 32, 8, requires_grad=True)
    hidden = 2 * 32 * 64
    assert saved_numel(Chunked(ff, 4, checkpoint=False), x) >= hidden
    assert saved_numel(Chunked(ff, 4, checkpoint=True), x) < hidden / 4


@pytest.mark.parametrize("chunks, error, match", [
    (0, ValueError, "got 0"), (-2, ValueError, "got -2"), (2.0, TypeError, "2.0"), ("4", TypeError, "'4'"),
])
def test_invalid_chunk_counts_name_the_value(chunks, error, match):
    with pytest.raises(error, match=match):
        Chunked(MLP(4, 8), chunks)
