"""Universal Transformer depth: T = 1 is a one-layer Transformer, T steps are the shared block
applied T times with the coordinate signal, and the t2t dynamic halting equals a
position-by-position reference (outputs, n_updates, remainders, gradients), stops computing
when every position has halted, is causal, and decodes from a KV cache exactly."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tfamily.models.hooks import AuxLoss, aux_losses
from tfamily.nn.attention import Attention
from tfamily.nn.block import Block
from tfamily.nn.depth import HaltingUnit, Stack, Universal, UniversalACT
from tfamily.nn.feedforward import MLP
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import SDPAKernel
from tfamily.nn.patterns import Causal, Full
from tfamily.nn.position import Sinusoidal, sinusoid_table
from tfamily.nn.position.coordinate import Coordinate
from tfamily.nn.residual import PostNorm
from tfamily.nn.state import new_state

D = 16


def _attn(pattern):
    return Attention(QKVProjection(D, 4, 4, 4), SDPAKernel(), pattern, D)


def _block(pattern=None, cross=False):
    return Block(_attn(pattern or Causal()), MLP(D, 32), PostNorm(D), PostNorm(D),
                 cross=_attn(Full()) if cross else None, cross_residual=PostNorm(D) if cross else None)


def _act(block, max_steps=6, bias=-0.5, spread=4.0, eps=0.01):
    halting = HaltingUnit(D, bias)
    with torch.no_grad():
        halting.linear.weight.mul_(spread)  # spread p so positions halt at different steps
    return UniversalACT(block, Coordinate(D), halting, max_steps, eps=eps, ponder_weight=0.01)


class Scripted(nn.Module):
    """A halting unit that returns ``values[t]`` at its t-th call (a test double)."""

    def __init__(self, values):
        super().__init__()
        self.values, self.calls = values, 0

    def forward(self, x):
        v = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return torch.full(x.shape[:2], float(v))


def _reference(ut: UniversalACT, x, key_padding=None, **kw):
    """t2t's ACT loop read position by position, run for every step (no early stop)."""
    b, n, _ = x.shape
    ps, outs = [], []
    for t in range(ut.max_steps):
        x = ut.coordinate(x, t + 1)
        ps.append(ut.halting(x))
        x = ut.block(x, key_padding=key_padding, **kw)
        outs.append(x)
    thr = 1 - ut.eps
    acc = torch.zeros_like(x)
    n_up, rem = torch.zeros(b, n), torch.zeros(b, n)
    rows, terms = [], []
    for i in range(b):
        for j in range(n):
            if key_padding is not None and not key_padding[i, j]:
                rows.append(torch.zeros(D))
                continue
            a, h = torch.zeros(D), torch.zeros(())
            for t in range(ut.max_steps):
                p = ps[t][i, j]
                if float((h + p).detach()) > thr:  # halts now: weight = remainder
                    r = 1 - h
                    a = outs[t][i, j] * r + a * (1 - r)
                    n_up[i, j], rem[i, j] = t + 1, r.detach()
                    rem_grad = r
                    break
                h = h + p
                a = outs[t][i, j] * p + a * (1 - p)
            else:  # the cap: no remainder
                n_up[i, j], rem_grad = ut.max_steps, torch.zeros(())
            rows.append(a)
            terms.append(n_up[i, j] + rem_grad)  # n_updates + remainder, gradient only via r
    ponder = ut.ponder_weight * torch.stack(terms).sum() / len(terms)
    return torch.stack(rows).view(b, n, D), n_up, rem, ponder


@pytest.mark.parametrize("seed,n,padded", [(0, 5, 0), (1, 9, 2), (2, 3, 1), (3, 12, 0)])
def test_act_equals_position_by_position_reference(seed, n, padded):
    torch.manual_seed(seed)
    ut = _act(_block(Full()), max_steps=6)
    x = torch.randn(3, n, D, requires_grad=True)
    kp = None
    if padded:
        kp = torch.ones(3, n, dtype=torch.bool)
        kp[1, n - padded:] = False
    out = ut(x, key_padding=kp)
    ref, n_up, rem, ponder_ref = _reference(ut, x, key_padding=kp)
    real = kp if kp is not None else torch.ones(3, n, dtype=torch.bool)
    assert len(set(n_up[real].tolist())) > 1, "positions should halt at different steps"
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(ut.n_updates[real], n_up[real])
    torch.testing.assert_close(ut.remainders, rem)
    torch.testing.assert_close(ut.aux_loss(), ponder_ref)
    assert ut.steps_executed == int(n_up[real].max())
    params = [x, *ut.parameters()]
    g = torch.autograd.grad((out ** 2).sum() + 10 * ut.aux_loss(), params, allow_unused=True)
    g_ref = torch.autograd.grad((ref ** 2).sum() + 10 * ponder_ref, params, allow_unused=True)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


def test_one_step_equals_a_one_layer_transformer():
    torch.manual_seed(0)
    block = _block()
    x = torch.randn(2, 7, D)
    step_1 = sinusoid_table(torch.tensor([1]), D)  # eq. 6-7: the step signal of t = 1
    expected = Stack([block])(Sinusoidal(D)(x) + step_1)
    torch.testing.assert_close(Universal(block, Coordinate(D), 1)(x), expected)


def test_t_steps_apply_the_shared_block_t_times():
    torch.manual_seed(1)
    block, norm = _block(), nn.LayerNorm(D)
    x = torch.randn(2, 6, D)
    h = x
    for t in range(1, 5):
        h = block(Coordinate(D)(h, t))
    ut = Universal(block, Coordinate(D), 4, final_norm=norm)
    torch.testing.assert_close(ut(x), norm(h))
    assert len(ut) == 4 and ut.steps_executed == 4
    assert sum(p.numel() for p in ut.parameters()) == sum(p.numel() for p in block.parameters()) + 2 * D


@pytest.mark.parametrize("k", [1, 2, 4])
def test_forced_halt_at_step_k_equals_k_steps(k):
    torch.manual_seed(k)
    block = _block()
    x = torch.randn(2, 5, D)
    ut = UniversalACT(block, Coordinate(D), Scripted([0.0] * (k - 1) + [1.0]), 8)
    calls = []
    block.register_forward_hook(lambda *a: calls.append(1))
    out = ut(x)
    assert ut.steps_executed == k and len(calls) == k  # compute stopped at step k
    torch.testing.assert_close(out, Universal(block, Coordinate(D), k)(x))
    assert ut.n_updates.eq(k).all() and ut.remainders.eq(1).all()


def test_strict_threshold_and_no_remainder_at_the_cap():
    x = torch.randn(1, 3, D)
    # eps = 0.5: cumulative 0.25, 0.5 (== 1 - eps: still running, strict), 0.75 > 0.5 halts at 3.
    ut = UniversalACT(_block(), Coordinate(D), Scripted([0.25]), 8, eps=0.5)
    ut(x)
    assert ut.n_updates.eq(3).all() and ut.remainders.eq(0.5).all() and ut.steps_executed == 3
    # p = 0.1 never reaches 0.99 in 3 steps: n_updates = 3 and no remainder (t2t), unlike Graves.
    ut = UniversalACT(_block(), Coordinate(D), Scripted([0.1]), 3)
    ut(x)
    assert ut.n_updates.eq(3).all() and ut.remainders.eq(0).all()
    torch.testing.assert_close(ut.aux_loss(), torch.tensor(0.03))


@pytest.mark.parametrize("p,n", [(0.3, 4), (0.2, 5), (0.45, 3)])
def test_ponder_gradient_reaches_the_halting_unit_only_through_the_remainder(p, n):
    """p constant: remainder = 1 - (n - 1) p, so d ponder / d bias = -w (n - 1) p (1 - p);
    n_updates adds nothing."""
    ut = UniversalACT(_block(), Coordinate(D), HaltingUnit(D), 10, ponder_weight=0.01)
    with torch.no_grad():
        ut.halting.linear.weight.zero_()
        ut.halting.linear.bias.fill_(math.log(p / (1 - p)))
    ut(torch.randn(2, 4, D))
    assert ut.n_updates.eq(n).all()
    loss = ut.aux_loss()
    torch.testing.assert_close(loss, torch.tensor(0.01 * (n + 1 - (n - 1) * p)))
    loss.backward()
    torch.testing.assert_close(ut.halting.linear.bias.grad, torch.tensor([-0.01 * (n - 1) * p * (1 - p)]))
    assert all(q.grad is None or q.grad.abs().sum() == 0 for q in ut.block.parameters())


def test_ponder_loss_reaches_the_models_aux_losses():
    ut = _act(_block())
    assert isinstance(ut, AuxLoss)
    model = nn.ModuleDict({"decoder": ut})
    ut(torch.randn(2, 4, D))
    assert set(aux_losses(model)) == {"decoder"} and aux_losses(model)["decoder"].requires_grad


@pytest.mark.parametrize("make", [lambda b: Universal(b, Coordinate(D), 3), lambda b: _act(b, 5)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_causal_later_edits_never_change_earlier_outputs(make, seed):
    torch.manual_seed(seed)
    ut = make(_block(Causal()))
    x = torch.randn(2, 10, D)
    y = x.clone()
    y[:, 6:] = torch.randn(2, 4, D) * 3
    torch.testing.assert_close(ut(x)[:, :6], ut(y)[:, :6])


@pytest.mark.parametrize("make", [lambda b: Universal(b, Coordinate(D), 3), lambda b: _act(b, 5)])
@pytest.mark.parametrize("seed,chunks", [(0, [1] * 7), (1, [3, 1, 2, 1]), (2, [4, 4])])
def test_kv_cached_decoding_equals_recomputation(make, seed, chunks):
    torch.manual_seed(seed)
    ut = make(_block(Causal())).eval()
    x = torch.randn(2, sum(chunks), D)
    full = ut(x)
    state, outs, start = new_state(len(ut)), [], 0
    for c in chunks:
        outs.append(ut(x[:, start:start + c], state=state))
        start += c
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_cross_attention_and_cached_cross_decoding():
    torch.manual_seed(3)
    ut = _act(_block(Causal(), cross=True), 4).eval()
    x, ctx = torch.randn(2, 5, D), torch.randn(2, 7, D)
    full = ut(x, context=ctx)
    ref = _reference(ut, x, context=ctx)[0]
    torch.testing.assert_close(full, ref)
    state = new_state(len(ut), cross=True)
    steps = [ut(x[:, i:i + 1], state=state, context=ctx) for i in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="n_steps"):
        Universal(_block(), Coordinate(D), 0)
    with pytest.raises(ValueError, match="max_steps"):
        UniversalACT(_block(), Coordinate(D), HaltingUnit(D), 0)
    with pytest.raises(ValueError, match="eps"):
        UniversalACT(_block(), Coordinate(D), HaltingUnit(D), 3, eps=0.0)
    with pytest.raises(ValueError, match="3 steps"):
        Universal(_block(), Coordinate(D), 3)(torch.randn(1, 2, D), state=new_state(2))
    assert HaltingUnit(D).linear.bias.item() == 1.0
