"""The position-wise MLP. Vaswani et al. 2017, eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2;
GELU as in BERT/GPT."""
from __future__ import annotations

from torch import Tensor, nn

from ...registry import ACTIVATIONS, FEEDFORWARDS
from ..dropout import maybe_dropout
from ..state import LayerState

ACTIVATIONS.register("relu", nn.ReLU)
ACTIVATIONS.register("gelu", nn.GELU)
# GPT-2's (and BERT's released code's) tanh approximation of GELU (Hendrycks & Gimpel 2016, section 2).
ACTIVATIONS.register("gelu_tanh", lambda: nn.GELU(approximate="tanh"))


class SigmoidGELU(nn.Module):
    """GELU's sigmoid approximation x * sigmoid(1.702 x) (Hendrycks & Gimpel 2016, section 2), the
    Sparse Transformer's f (Child et al. 2019, section 5.2); torch's GELU offers only erf and tanh."""

    def forward(self, x: Tensor) -> Tensor:
        return x * (1.702 * x).sigmoid()


ACTIVATIONS.register("gelu_sigmoid", SigmoidGELU)
# SiLU = Swish-1 (Ramachandran et al. 2017): x * sigmoid(x), SwiGLU's gate (feedforward/glu.py).
ACTIVATIONS.register("silu", nn.SiLU)


class MLP(nn.Module):
    """``dropout`` acts on the hidden activations (the Transformer's tensor2tensor code and
    BERT do not; the spec's ``ff_dropout`` says where each member drops)."""
    citation = "Vaswani et al. 2017, eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2 (GELU: Hendrycks & Gimpel 2016)"

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff, bias=bias), ACTIVATIONS[activation](),
                                 maybe_dropout(dropout), nn.Linear(d_ff, d_model, bias=bias))

    @property
    def out_proj(self) -> nn.Linear:
        """The linear layer whose output joins the residual stream (``nn/init/``)."""
        return self.net[-1]

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """Position-wise: ``state`` and ``padding`` are not needed."""
        return self.net(x)


# Chunking (FeedForwardSpec.chunks) wraps any registered part, so it is not a choice here.
FEEDFORWARDS.register("mlp", MLP, needs=("d_model", "d_ff", "activation", "dropout", "bias"))
