"""The heads axis: how queries, keys and values become heads (``Heads``).

``QKVProjection`` covers multi-head, grouped-query (Ainslie et al. 2023) and multi-query
attention by its ``n_kv_heads``; ``SharedQKProjection`` is the Reformer's shared-QK
attention (Kitaev et al. 2020, section 2). Both register in ``HEADS`` (``tfamily.registry``).
"""
from ...registry import HEADS
from .base import Heads
from .projection import QKVProjection, SharedQKProjection

__all__ = ["Heads", "QKVProjection", "SharedQKProjection", "HEADS"]
