"""The init axis: how the weights of the shared parts start (``InitScheme``).

``torch`` keeps each part's own default; ``normal`` is GPT-2's N(0, 0.02) with the residual
projections scaled by 1/sqrt(2 L) (``schemes``). Both register in ``INITS``
(``tfamily.registry``); the builder applies the chosen one with ``init_linears``.
"""
from ...registry import INITS
from .base import InitScheme
from .schemes import Normal, TorchDefault, init_linears

__all__ = ["InitScheme", "TorchDefault", "Normal", "init_linears", "INITS"]
