"""ACT around a recurrent cell (Graves 2016): weights sum to 1, N and R by hand, the ponder
cost's gradient only through R, M = 1 is the plain cell, and the batched loop equals a
row-by-row reference in outputs and gradients for RNN, GRU and LSTM cells."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tfamily.nn.depth import ACT

D, H, OUT = 5, 8, 3
CELLS = {"rnn": lambda: nn.RNNCell(D + 1, H), "gru": lambda: nn.GRUCell(D + 1, H),
         "lstm": lambda: nn.LSTMCell(D + 1, H)}


def _act(kind="rnn", max_steps=6, bias=1.0, eps=0.01):
    return ACT(CELLS[kind](), nn.Linear(H, OUT), max_steps=max_steps, eps=eps, halting_bias=bias)


def _constant_halting(act: ACT, h: float) -> None:
    """Make every halting unit output exactly ``h`` (zero weights, logit bias)."""
    with torch.no_grad():
        act.halt.weight.zero_()
        act.halt.bias.fill_(math.log(h / (1 - h)))


def _reference(act: ACT, x: torch.Tensor):
    """Graves 2016 eq. 5-11 for one row at a time, written as the paper reads: run the cell,
    collect h^n until the cumulative sum reaches 1 - eps or M, then weight the states."""
    ys, states, rhos = [], [], []
    for row in range(x.shape[0]):
        s, y_row, rho = None, [], 0.0
        for t in range(x.shape[1]):
            hs, ss, cum = [], [], 0.0
            for n in range(1, act.max_steps + 1):
                inp = torch.cat([x[row:row + 1, t], torch.full((1, 1), 1.0 if n == 1 else 0.0)], dim=-1)
                prev = s if n == 1 else ss[-1]
                out = act.cell(inp, None if prev is None else (prev[0] if act.n_state == 1 else prev))
                ss.append((out,) if act.n_state == 1 else tuple(out))
                hs.append(torch.sigmoid(act.halt(torch.cat(ss[-1], dim=-1)))[0, 0])
                if float((cum + hs[-1]).detach()) >= 1 - act.eps or n == act.max_steps:
                    break
                cum = cum + hs[-1]
            r = 1 - sum(hs[:-1]) if len(hs) > 1 else torch.ones(())
            p = hs[:-1] + [r]
            s = tuple(sum(pi * st[i] for pi, st in zip(p, ss)) for i in range(act.n_state))
            y_row.append(sum(pi * act.readout(st[0]) for pi, st in zip(p, ss)))
            rho = rho + len(hs) + r
        ys.append(torch.cat(y_row, dim=0))
        states.append(s)
        rhos.append(rho)
    state = tuple(torch.cat([st[i] for st in states]) for i in range(act.n_state))
    return torch.stack(ys), state, torch.stack([torch.as_tensor(r) for r in rhos])


@pytest.mark.parametrize("kind", sorted(CELLS))
@pytest.mark.parametrize("seed,T", [(0, 1), (1, 3), (2, 2)])
def test_batched_equals_row_by_row_reference(kind, seed, T):
    torch.manual_seed(seed)
    act = _act(kind, max_steps=7, bias=-0.5)
    with torch.no_grad():
        act.halt.weight.mul_(4.0)  # spread h so rows halt at different steps
    x = torch.randn(6, T, D, requires_grad=True)
    out = act(x)
    assert len(set(out.n.flatten().tolist())) > 1, "rows should halt at different steps"
    y_ref, s_ref, rho_ref = _reference(act, x)
    torch.testing.assert_close(out.y, y_ref)
    got_state = (out.state,) if isinstance(out.state, torch.Tensor) else out.state
    for a, b in zip(got_state, s_ref):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(out.ponder, rho_ref)
    params = [x, *act.parameters()]
    loss = (out.y ** 2).sum() + got_state[-1].sum() + 0.1 * out.ponder.sum()
    loss_ref = (y_ref ** 2).sum() + s_ref[-1].sum() + 0.1 * rho_ref.sum()
    for g, g_ref in zip(torch.autograd.grad(loss, params, allow_unused=True),
                        torch.autograd.grad(loss_ref, params, allow_unused=True)):
        torch.testing.assert_close(g, g_ref)
    assert out.steps == [int(n) for n in out.n.max(dim=0).values]


def test_weights_sum_to_one_also_at_the_cap():
    """A readout constant in the state returns that constant iff sum_n p^n = 1 (eq. 7-8)."""
    torch.manual_seed(4)
    readout = nn.Linear(H, OUT)
    with torch.no_grad():
        readout.weight.zero_()
    for max_steps, bias in ((100, 1.0), (4, -3.0), (6, -0.5)):
        act = ACT(nn.GRUCell(D + 1, H), readout, max_steps=max_steps, halting_bias=bias)
        out = act(torch.randn(32, 3, D))
        torch.testing.assert_close(out.y, readout.bias.expand_as(out.y))
        if max_steps == 4:
            assert out.n.eq(4).all()  # h ~ 0.05 never reaches 1 - eps in 4 steps: the cap


@pytest.mark.parametrize("h,max_steps,n,r", [(0.3, 100, 4, 0.1), (0.3, 3, 3, 0.4), (0.995, 100, 1, 1.0),
                                             (0.5, 100, 2, 0.5), (0.25, 100, 4, 0.25)])
def test_n_and_r_by_hand(h, max_steps, n, r):
    # h = 0.3: cumulative 0.3, 0.6, 0.9, 1.2 >= 0.99 first at n = 4; R = 1 - 0.9 = 0.1.
    # At the cap M = 3: N = 3, R = 1 - 0.6. h^1 >= 1 - eps: N = 1, R = 1.
    # h = 0.5: 0.5, 1.0 >= 0.99 at n = 2, R = 0.5. h = 0.25: 0.75 < 0.99, 1.0 at n = 4, R = 0.25.
    act = _act(max_steps=max_steps)
    _constant_halting(act, h)
    out = act(torch.randn(4, 2, D))
    assert out.n.eq(n).all() and out.steps == [n, n]
    torch.testing.assert_close(out.remainder, torch.full((4, 2), r), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.ponder, torch.full((4,), 2 * (n + r)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("h,n", [(0.3, 4), (0.2, 5), (0.6, 2), (0.995, 1)])
def test_ponder_gradient_flows_only_through_r(h, n):
    """d rho / d h^n = -1 for n < N and 0 for n = N (eq. 12-13); with every h^n = sigmoid(b),
    d rho / d b = -(N - 1) sigmoid'(b): N itself contributes nothing."""
    act = _act(max_steps=100)
    _constant_halting(act, h)
    out = act(torch.randn(3, 1, D))
    assert out.n.eq(n).all() and not out.n.requires_grad
    if n == 1:  # R = 1 - (empty sum): rho = 2 is constant, nothing to differentiate
        assert not out.ponder.requires_grad
        return
    out.ponder.sum().backward()
    expected = -3 * (n - 1) * h * (1 - h)
    torch.testing.assert_close(act.halt.bias.grad, torch.tensor([expected]), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_one_step_equals_the_plain_cell(kind):
    torch.manual_seed(5)
    act = _act(kind, max_steps=1)
    x = torch.randn(4, 3, D)
    out = act(x)
    s, ys = None, []
    for t in range(3):
        inp = torch.cat([x[:, t], torch.ones(4, 1)], dim=-1)
        s = act.cell(inp, s)
        ys.append(act.readout(s[0] if kind == "lstm" else s))
    torch.testing.assert_close(out.y, torch.stack(ys, dim=1), rtol=0, atol=0)
    if kind == "lstm":
        torch.testing.assert_close(out.state[1], s[1], rtol=0, atol=0)
    assert out.n.eq(1).all() and out.remainder.eq(1).all() and out.steps == [1, 1, 1]


def test_loop_stops_when_every_row_has_halted():
    act = _act(max_steps=50)
    _constant_halting(act, 0.3)
    calls = []
    act.cell.register_forward_hook(lambda *a: calls.append(1))
    act(torch.randn(8, 2, D))
    assert len(calls) == 8  # 4 ponder steps per input step, not 50


def test_state_continues_from_the_given_state():
    torch.manual_seed(6)
    act = _act("lstm", max_steps=5, bias=-1.0)
    x = torch.randn(3, 4, D)
    whole = act(x)
    first = act(x[:, :2])
    second = act(x[:, 2:], first.state)
    torch.testing.assert_close(torch.cat([first.y, second.y], dim=1), whole.y)
    torch.testing.assert_close(first.ponder + second.ponder, whole.ponder)


def test_bad_arguments_name_the_value():
    with pytest.raises(TypeError, match="Linear"):
        ACT(nn.Linear(3, 3), nn.Linear(3, 1))
    with pytest.raises(ValueError, match="max_steps"):
        ACT(nn.RNNCell(3, 4), nn.Linear(4, 1), max_steps=0)
    with pytest.raises(ValueError, match="eps"):
        ACT(nn.RNNCell(3, 4), nn.Linear(4, 1), eps=1.0)
    with pytest.raises(ValueError, match=r"\(batch, T, 2\)"):
        ACT(nn.RNNCell(3, 4), nn.Linear(4, 1))(torch.randn(2, 3, 3))
    assert ACT(nn.RNNCell(3, 4), nn.Linear(4, 1)).halt.bias.item() == 1.0
