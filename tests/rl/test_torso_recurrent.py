"""The recurrent torso is the library's recurrent stack and ``RNNState``: it equals the flat
reference below (the torso as it was, a ``torch.nn`` LSTM/GRU with a state of its own) in
initial weights, outputs, resets, replay and gradients, and loads that torso's checkpoints."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from tfamily.nn.depth import RecurrentStack, RNNState
from tfamily.rl.torso import build_torso


class FlatRecurrentTorso(nn.Module):
    """The reference: one torch RNN stepped by hand; a reset row's (h, c) become zeros."""

    def __init__(self, kind: str, d_model: int, n_layers: int):
        super().__init__()
        self.kind = kind
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[kind](d_model, d_model, num_layers=n_layers, batch_first=True)

    def step(self, x: Tensor, hidden):
        y, hidden = self.rnn(x[:, None], hidden)
        return y[:, 0], hidden

    def reset(self, hidden, rows: Tensor):
        if hidden is None:
            return None
        keep = lambda t: t.masked_fill(rows[None, :, None], 0.0)  # noqa: E731
        return tuple(map(keep, hidden)) if self.kind == "lstm" else keep(hidden)

    def replay(self, x: Tensor, starts: Tensor, hidden) -> Tensor:
        out = []
        for t in range(x.shape[0]):
            hidden = self.reset(hidden, starts[t])
            y, hidden = self.step(x[t], hidden)
            out.append(y)
        return torch.stack(out)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_torso_equals_the_flat_reference(kind):
    torch.manual_seed(3)
    torso = build_torso(kind, d_model=8, n_layers=2)
    torch.manual_seed(3)
    flat = FlatRecurrentTorso(kind, 8, 2)
    assert isinstance(torso.stack, RecurrentStack) and isinstance(torso.new_state(), RNNState)
    # Same seed, same initial weights: an RL run's policy starts where it used to.
    mine = {k.removeprefix("stack."): v for k, v in torso.state_dict().items()}
    assert mine.keys() == flat.state_dict().keys()
    assert all(torch.equal(mine[k], v) for k, v in flat.state_dict().items())
    g = torch.Generator().manual_seed(0)
    T, b = 7, 5
    x = torch.randn(T, b, 8, generator=g)
    starts = torch.rand(T, b, generator=g) < 0.3
    # Acting step by step, resetting the rows whose episode ended.
    with torch.no_grad():
        state, hidden = torso.new_state(), None
        for t in range(T):
            state.reset(starts[t])
            hidden = flat.reset(hidden, starts[t])
            y, (want, hidden) = torso(x[t], state), flat.step(x[t], hidden)
            assert torch.equal(y, want)
    # The PPO replay from a stored state: outputs and gradients.
    start_hidden = (state.h, state.c) if kind == "lstm" else state.h
    got = torso.replay(x, starts, state, torso.trace(state))
    want = flat.replay(x, starts, start_hidden)
    assert torch.equal(got, want)
    w = torch.randn(T, b, 8, generator=g)
    (got * w).sum().backward()
    (want * w).sum().backward()
    for name, p in flat.named_parameters():
        assert torch.equal(dict(torso.named_parameters())["stack." + name].grad, p.grad), name


def test_recurrent_torso_loads_the_old_parameter_names():
    torch.manual_seed(0)
    flat = FlatRecurrentTorso("gru", 8, 1)
    torso = build_torso("gru", d_model=8, n_layers=1)
    torso.load_state_dict(flat.state_dict())
    assert torch.equal(torso.stack.rnn.weight_hh_l0, flat.rnn.weight_hh_l0)
