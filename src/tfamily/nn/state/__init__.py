"""The state axis: what crosses step or segment boundaries (``State``).

``CacheState`` (``cache``) holds KV caches for decoding; ``SegmentMemory`` (``memory``) is
Transformer-XL's memory; the recurrent depths' ``RNNState`` (``nn/depth/recurrent.py``) an
RNN's hidden state. A new kind of state (an LSTM's h and c) is a new class, not a branch
in the model or the trainer. Each kind registers in ``STATES`` beside its class: ``make(layers, ...)``
returns the model's ``new_state`` (None: a KV cache per layer, built when decoding).
"""
from .base import State, row_mask
from .cache import CacheState, KVCache, LayerState, new_state, reorder_state
from .memory import SegmentMemory, next_memory, next_padding

__all__ = ["State", "row_mask", "KVCache", "LayerState", "CacheState", "new_state", "reorder_state",
           "SegmentMemory", "next_memory", "next_padding"]
