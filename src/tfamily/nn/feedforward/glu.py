"""Gated linear units in the feed-forward (Shazeer 2020, eq. 5-6): FFN_GLU(x) =
(act(x W) * x V) W2. With SiLU (Swish-1) it is SwiGLU, the feed-forward of PaLM and Llama;
with GELU, GeGLU. Three matrices instead of two: at equal cost the paper shrinks d_ff by
2/3 (Llama's 11008 for d 4096), which the spec's ``ff.d_ff`` sets."""
from __future__ import annotations

from torch import Tensor, nn

from ...registry import ACTIVATIONS, FEEDFORWARDS
from ..dropout import maybe_dropout
from ..state import LayerState


class GLU(nn.Module):
    """``gate`` (W) and ``up`` (V) read x; ``down`` (W2) writes the stream. Dropout acts on the
    gated hidden activations, where the MLP's acts."""
    citation = "Shazeer 2020, eq. 6 (SwiGLU with SiLU): FFN(x) = (Swish(x W) * x V) W2, no biases in Llama"

    def __init__(self, d_model: int, d_ff: int, activation: str = "silu", dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.act, self.drop = ACTIVATIONS[activation](), maybe_dropout(dropout)

    @property
    def out_proj(self) -> nn.Linear:
        """The linear layer whose output joins the residual stream (``nn/init/``)."""
        return self.down

    def forward(self, x: Tensor, *, state: LayerState | None = None, padding: Tensor | None = None) -> Tensor:
        """``x``: (b, n, d) -> (b, n, d); position-wise, so ``state`` and ``padding`` are not needed."""
        return self.down(self.drop(self.act(self.gate(x)) * self.up(x)))


FEEDFORWARDS.register("glu", GLU, needs=("d_model", "d_ff", "activation", "dropout", "bias"))
