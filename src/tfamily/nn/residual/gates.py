"""Gated residuals: the gating layers of Parisotto et al. 2019, section 3.2 (GTrXL).

Each keeps the identity-map reordering of ``IdentityMap`` (TrXL-I: ``pre`` is a LayerNorm
on the sublayer's input, XL memory included) and replaces its sum x + y with a gate
g(x, y), where x is the residual stream and y = ReLU(sublayer output). Every residual
instance owns its gate's weights, so each sublayer of each layer has its own (the paper's
g^(l)_MHA and g^(l)_MLP). The matrices carry no bias: b_g is the only one, a learned
per-feature vector initialised at ``gate_bias``. A large b_g closes the output, highway,
sigmoid-tanh and GRU gates (g -> x: the block is the identity map); the paper's defaults
are b_g = 2 for the GRU gate (z ~= sigmoid(-2) = 0.12, near the identity) and 1 for the
others; the input gate has no bias.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...base.numbers import check_number
from ...registry import RESIDUALS
from ..dropout import maybe_dropout
from .base import or_layer_norm


def check_gate_bias(value: object) -> float:
    """``value`` as b_g, refusing what is not a finite number."""
    return check_number("residual.params.gate_bias", value,
                        hint="b_g, e.g. 2.0; a closed gate needs only a large b_g (e.g. 20.0)")


def _bias(d_model: int, gate_bias: object) -> nn.Parameter:
    return nn.Parameter(torch.full((d_model,), check_gate_bias(gate_bias)))


class InputGate(nn.Module):
    """Parisotto et al. 2019, section 3.2, input gating: g = sigmoid(W_g x) * x + y."""
    citation = "Parisotto et al. 2019, section 3.2: g = sigmoid(W_g x) * x + y, y = ReLU(Sublayer(LN(x)))"

    def __init__(self, d_model: int, dropout: float = 0.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)
        self.w_g = nn.Linear(d_model, d_model, bias=False)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return torch.sigmoid(self.w_g(x)) * x + F.relu(self.drop(y))


class OutputGate(nn.Module):
    """Parisotto et al. 2019, section 3.2, output gating: g = x + sigmoid(W_g x - b_g) * y."""
    citation = "Parisotto et al. 2019, section 3.2: g = x + sigmoid(W_g x - b_g) * y"

    def __init__(self, d_model: int, dropout: float = 0.0, gate_bias: float = 1.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)
        self.w_g, self.b_g = nn.Linear(d_model, d_model, bias=False), _bias(d_model, gate_bias)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        return x + torch.sigmoid(self.w_g(x) - self.b_g) * F.relu(self.drop(y))


class HighwayGate(nn.Module):
    """Parisotto et al. 2019, section 3.2, highway connection (Srivastava et al. 2015):
    g = sigmoid(W_g x + b_g) * x + (1 - sigmoid(W_g x + b_g)) * y."""
    citation = "Parisotto et al. 2019, section 3.2: g = s * x + (1 - s) * y, s = sigmoid(W_g x + b_g)"

    def __init__(self, d_model: int, dropout: float = 0.0, gate_bias: float = 1.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)
        self.w_g, self.b_g = nn.Linear(d_model, d_model, bias=False), _bias(d_model, gate_bias)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        carry = torch.sigmoid(self.w_g(x) + self.b_g)  # + b_g: here a large bias keeps x
        return carry * x + (1 - carry) * F.relu(self.drop(y))


class SigmoidTanhGate(nn.Module):
    """Parisotto et al. 2019, section 3.2, sigmoid-tanh gating:
    g = x + sigmoid(W_g y - b_g) * tanh(U_g y)."""
    citation = "Parisotto et al. 2019, section 3.2: g = x + sigmoid(W_g y - b_g) * tanh(U_g y)"

    def __init__(self, d_model: int, dropout: float = 0.0, gate_bias: float = 1.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)
        self.wu = nn.Linear(d_model, 2 * d_model, bias=False)  # [W_g; U_g], both read y
        self.b_g = _bias(d_model, gate_bias)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        w, u = self.wu(F.relu(self.drop(y))).chunk(2, dim=-1)
        return x + torch.sigmoid(w - self.b_g) * torch.tanh(u)


class GRUGate(nn.Module):
    """Parisotto et al. 2019, section 3.2, GRU-type gating (the GTrXL's): r = sigmoid(W_r y +
    U_r x), z = sigmoid(W_z y + U_z x - b_g), h = tanh(W_g y + U_g (r * x)), g = (1 - z) * x + z * h.

    Not ``torch.nn.GRUCell``: that one applies the reset after U_g's matmul, adds biases to
    every term and lets z weigh the old state, so its closed gate is not g -> x.
    """
    citation = ("Parisotto et al. 2019, section 3.2 (GTrXL): g = (1 - z) * x + z * tanh(W_g y + U_g (r * x)), z = "
                "sigmoid(W_z y + U_z x - b_g)")

    def __init__(self, d_model: int, dropout: float = 0.0, gate_bias: float = 2.0, bias: bool = True,
                 norm: nn.Module | None = None):
        super().__init__()
        self.norm, self.drop = or_layer_norm(norm, d_model, bias), maybe_dropout(dropout)
        self.w = nn.Linear(d_model, 3 * d_model, bias=False)  # [W_r; W_z; W_g], on y
        self.u = nn.Linear(d_model, 2 * d_model, bias=False)  # [U_r; U_z], on x
        self.u_g = nn.Linear(d_model, d_model, bias=False)    # on r * x: after the reset
        self.b_g = _bias(d_model, gate_bias)

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x)

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        w_r, w_z, w_g = self.w(F.relu(self.drop(y))).chunk(3, dim=-1)
        u_r, u_z = self.u(x).chunk(2, dim=-1)
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.b_g)
        h = torch.tanh(w_g + self.u_g(r * x))
        return (1 - z) * x + z * h


# All keep the stream unnormalised to the last layer (identity-map reordering): one final norm.
_NEEDS = ("d_model", "dropout", "bias", "norm")
RESIDUALS.register("input_gate", InputGate, needs=_NEEDS, final_norm=True)
RESIDUALS.register("output_gate", OutputGate, needs=_NEEDS, final_norm=True)
RESIDUALS.register("highway_gate", HighwayGate, needs=_NEEDS, final_norm=True)
RESIDUALS.register("sigmoid_tanh_gate", SigmoidTanhGate, needs=_NEEDS, final_norm=True)
RESIDUALS.register("gru_gate", GRUGate, needs=_NEEDS, final_norm=True)
