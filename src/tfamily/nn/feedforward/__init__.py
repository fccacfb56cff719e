"""The feed-forward axis: what runs at each position (``FeedForward``).

The MLP of Vaswani et al. 2017, eq. 2 (``mlp``), its gated form (``glu``: SwiGLU, GeGLU),
the Universal Transformer's separable convolution (``sepconv``), and chunking along the sequence around any position-wise part
(``chunked``). Parts and activations register in ``FEEDFORWARDS`` and ``ACTIVATIONS``
(``tfamily.registry``) beside their code.
"""
from ...registry import ACTIVATIONS, FEEDFORWARDS
from .base import FeedForward, own_padding
from .chunked import Chunked
from .glu import GLU
from .mlp import MLP
from .sepconv import SepConvTransition, SeparableConv1d

__all__ = ["FeedForward", "own_padding", "MLP", "GLU", "Chunked", "SeparableConv1d", "SepConvTransition",
           "FEEDFORWARDS", "ACTIVATIONS"]
