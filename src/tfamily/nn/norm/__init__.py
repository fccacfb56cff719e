"""The norm axis: which normalisation the residuals, the final norm and the heads use.

LayerNorm (Ba et al. 2016) centres and scales each position's features; RMSNorm (Zhang &
Sennrich 2019) only rescales them by their root mean square (Llama, Mistral, T5). Where a
norm sits is the residual axis's business; this axis says which one it is. Each registers
in ``NORMS`` (``tfamily.registry``) with the sizes the builder supplies, as a ``MakeNorm``
(``base.py``) whose result is a ``Norm``.
"""
from ...registry import NORMS
from .base import MakeNorm, Norm
from .norms import RMSNorm, layer_norm, rms_norm

NORMS.register("layer_norm", layer_norm, needs=("d_model", "bias"))
NORMS.register("rms_norm", rms_norm, needs=("d_model", "bias"))

__all__ = ["MakeNorm", "Norm", "RMSNorm", "layer_norm", "rms_norm", "NORMS"]
