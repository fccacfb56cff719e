"""The residual axis: how a sublayer joins the stream (``Residual``: ``pre`` and ``post``).

Norm placements (``norms``): post-norm, pre-norm, the identity-map reordering. Gates
(``gates``): Parisotto et al. 2019, section 3.2 (GTrXL) replace the identity map's sum with
a gate. Each variant registers in ``RESIDUALS`` (``tfamily.registry``) beside its code.
"""
from ...registry import RESIDUALS
from .base import Residual
from .gates import GRUGate, HighwayGate, InputGate, OutputGate, SigmoidTanhGate, check_gate_bias
from .norms import IdentityMap, PostNorm, PreNorm

__all__ = ["Residual", "RESIDUALS", "PostNorm", "PreNorm", "IdentityMap", "InputGate", "OutputGate",
           "HighwayGate", "SigmoidTanhGate", "GRUGate", "check_gate_bias"]
