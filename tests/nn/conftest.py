"""Fixtures shared by the tests of the parts."""
from __future__ import annotations

import pytest
import torch


def _saved_numel(module, x) -> int:
    """How many elements autograd keeps for the backward pass of ``module(x)``: what activation
    memory a part costs, counted without timing or allocator noise."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return total


@pytest.fixture
def saved_numel():
    return _saved_numel
