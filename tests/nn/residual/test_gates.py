"""The gated residuals of Parisotto et al. 2019, section 3.2, each against its equation
written out here with the module's own weights (outputs and gradients), their b_g defaults,
closing, and the refusal of bad b_g values."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfamily import members
from tfamily.nn.residual import GRUGate, HighwayGate, InputGate, OutputGate, SigmoidTanhGate
from tfamily.registry import RESIDUALS

sig, tanh, relu = torch.sigmoid, torch.tanh, F.relu


def _mm(x, w):
    return x @ w.T  # a bias-free linear map, y = W x, written without nn.Linear


def input_gate(m, x, y):
    return sig(_mm(x, m.w_g.weight)) * x + relu(y)


def output_gate(m, x, y):
    return x + sig(_mm(x, m.w_g.weight) - m.b_g) * relu(y)


def highway_gate(m, x, y):
    s = sig(_mm(x, m.w_g.weight) + m.b_g)
    return s * x + (1 - s) * relu(y)


def sigmoid_tanh_gate(m, x, y):
    d = x.shape[-1]
    w_g, u_g = m.wu.weight[:d], m.wu.weight[d:]
    y = relu(y)
    return x + sig(_mm(y, w_g) - m.b_g) * tanh(_mm(y, u_g))


def gru_gate(m, x, y):
    d = x.shape[-1]
    w_r, w_z, w_g = m.w.weight[:d], m.w.weight[d:2 * d], m.w.weight[2 * d:]
    u_r, u_z, u_g = m.u.weight[:d], m.u.weight[d:], m.u_g.weight
    y = relu(y)
    r = sig(_mm(y, w_r) + _mm(x, u_r))
    z = sig(_mm(y, w_z) + _mm(x, u_z) - m.b_g)
    h = tanh(_mm(y, w_g) + _mm(r * x, u_g))
    return (1 - z) * x + z * h


GATES = {"input_gate": (InputGate, input_gate, None), "output_gate": (OutputGate, output_gate, 1.0),
         "highway_gate": (HighwayGate, highway_gate, 1.0),
         "sigmoid_tanh_gate": (SigmoidTanhGate, sigmoid_tanh_gate, 1.0), "gru_gate": (GRUGate, gru_gate, 2.0)}
BIASED = [n for n, (_, _, b) in GATES.items() if b is not None]


def _randomise(m, g):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 if p.dim() > 1 else 1.0))


@pytest.mark.parametrize("name", list(GATES))
@pytest.mark.parametrize("seed, shape", [(0, (2, 5, 8)), (1, (3, 1, 16)), (2, (1, 7, 12))])
def test_gate_equals_its_equation_outputs_and_gradients(name, seed, shape):
    cls, equation, _ = GATES[name]
    g = torch.Generator().manual_seed(seed)
    m = cls(shape[-1]).double()
    _randomise(m, g)  # b_g too, so its sign in the equation matters
    x = torch.randn(shape, generator=g, dtype=torch.double, requires_grad=True)
    y = torch.randn(shape, generator=g, dtype=torch.double, requires_grad=True)
    out, ref = m.post(x, y), equation(m, x, y)
    torch.testing.assert_close(out, ref)
    # pre: LayerNorm of the sublayer's input, with the module's own scale and shift
    torch.testing.assert_close(m.pre(x), F.layer_norm(x, shape[-1:], m.norm.weight, m.norm.bias))
    wrt = [x, y, *(p for n, p in m.named_parameters() if not n.startswith("norm"))]
    up = torch.randn(shape, generator=g, dtype=torch.double)
    for a, b in zip(torch.autograd.grad(out, wrt, up), torch.autograd.grad(ref, wrt, up)):
        torch.testing.assert_close(a, b)
        assert a.abs().sum() > 0  # every weight takes part


@pytest.mark.parametrize("name", list(GATES))
def test_registered_with_the_papers_default_bias(name):
    cls, _, default = GATES[name]
    entry = RESIDUALS.entry(name)
    assert entry.make is cls and entry.info["final_norm"]
    if default is None:  # the input gate has no b_g
        assert entry.params() == () and not hasattr(cls(8), "b_g")
    else:
        assert entry.params() == ("gate_bias",)
        assert torch.equal(cls(8).b_g, torch.full((8,), default))
        assert torch.equal(RESIDUALS.make(name, {"gate_bias": -0.5}, d_model=8, dropout=0.0).b_g,
                           torch.full((8,), -0.5))


@pytest.mark.parametrize("name", BIASED)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_large_bias_closes_the_gate(name, seed):
    cls = GATES[name][0]
    g = torch.Generator().manual_seed(seed)
    m = cls(16, gate_bias=100.0)
    x, y = torch.randn(2, 6, 16, generator=g), 3 * torch.randn(2, 6, 16, generator=g)
    torch.testing.assert_close(m.post(x, y), x, atol=1e-6, rtol=0)  # g -> x, not x + ReLU(y)
    assert not torch.allclose(cls(16).post(x, y), x, atol=1e-2)  # the default bias is not closed


def test_gru_bias_2_gives_z_near_sigmoid_minus_2():
    # With W and U zero the GRU gate is (1 - z) x + z tanh(0) with z = sigmoid(-b_g).
    m = GRUGate(8)
    with torch.no_grad():
        for lin in (m.w, m.u, m.u_g):
            lin.weight.zero_()
    x, y = torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    z = 1 / (1 + math.exp(2.0))
    assert abs(z - 0.1192) < 1e-4
    torch.testing.assert_close(m.post(x, y), (1 - z) * x)


def test_dropout_acts_on_the_branch_only_in_training():
    m = OutputGate(8, dropout=0.5)
    x, y = torch.randn(4, 5, 8), torch.randn(4, 5, 8)
    assert not torch.allclose(m.post(x, y), output_gate(m, x, y))
    m.eval()
    torch.testing.assert_close(m.post(x, y), output_gate(m, x, y))


def test_every_sublayer_has_its_own_gate_weights():
    spec = members.gtrxl(d_model=16, heads={"n_heads": 2, "d_head": 8}, depth__n_layers=3, ff__d_ff=32)
    from tfamily.build import build
    model = build(spec)
    gates = [r for b in model.stack.blocks for r in (b.attn_residual, b.ff_residual)]
    assert len(gates) == 6 and all(isinstance(r, GRUGate) for r in gates)
    params = [p for r in gates for p in r.parameters()]
    assert len({p.data_ptr() for p in params}) == len(params)


@pytest.mark.parametrize("bad, error, words", [
    ("2", TypeError, ["gate_bias", "number", "'2'"]),
    (True, TypeError, ["gate_bias", "True"]),
    (float("nan"), ValueError, ["gate_bias", "finite", "nan"]),
    (float("inf"), ValueError, ["gate_bias", "finite", "large b_g"]),
])
def test_bad_gate_bias_is_refused_when_the_spec_is_built(bad, error, words):
    with pytest.raises(error) as e:
        members.gtrxl(residual__params={"gate_bias": bad})
    assert all(w in str(e.value) for w in words), str(e.value)
    with pytest.raises(error):
        GRUGate(8, gate_bias=bad)


def test_unknown_residual_params_name_the_valid_keys():
    with pytest.raises(ValueError, match=r"\['bias'\].*valid keys: gate_bias"):
        members.gtrxl(residual__params={"bias": 1.0})
    with pytest.raises(ValueError, match="'input_gate' takes no parameters"):
        members.gtrxl(residual={"name": "input_gate", "params": {"gate_bias": 1.0}})
    with pytest.raises(TypeError, match="residual.params must be a dict"):
        members.gtrxl(residual__params=2.0)
