"""Whether a forward is being recorded into a graph rather than run.

``torch.compile``, ``torch.export`` (and the ONNX exporter built on it) and ``torch.jit.trace``
record the operations of one call. Python that reads a tensor's value back (``int(t.max())``,
``bool(t.all())``) or caches a tensor keyed on a shape then either breaks the graph, fails on a
data-dependent guard, or is frozen into it as a constant for the example's shape. Parts that do
so for speed in eager mode take a graph-friendly path with the same outputs while recording.
"""
from __future__ import annotations

import torch


def recording() -> bool:
    """True while torch.compile, torch.export or torch.jit.trace records the forward."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()
