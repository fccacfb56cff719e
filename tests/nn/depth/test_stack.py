"""The depth axis: a stack of N layers in order, with a final norm, per-layer state,
and activation checkpointing that changes neither outputs nor gradients."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tfamily.nn.attention import Attention
from tfamily.nn.block import Block
from tfamily.nn.depth import Stack
from tfamily.nn.feedforward import MLP
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import SDPAKernel
from tfamily.nn.patterns import Causal
from tfamily.nn.residual import PreNorm
from tfamily.nn.state import new_state

D = 16


def _blocks(n):
    return [Block(Attention(QKVProjection(D, 4, 4, 4), SDPAKernel(), Causal(), D), MLP(D, 32),
                  PreNorm(D), PreNorm(D)) for _ in range(n)]


def test_stack_applies_blocks_in_order_then_final_norm():
    blocks, norm = _blocks(3), nn.LayerNorm(D)
    stack = Stack(blocks, norm)
    x = torch.randn(2, 5, D)
    h = x
    for b in blocks:
        h = b(h)
    torch.testing.assert_close(stack(x), norm(h))
    assert len(stack) == 3
    assert isinstance(Stack(_blocks(1)).final_norm, nn.Identity)


def test_state_records_each_layer_input():
    stack = Stack(_blocks(2))
    x = torch.randn(1, 4, D)
    state = new_state(2)
    stack(x, state=state)
    assert torch.equal(state[0].inputs, x)
    torch.testing.assert_close(state[1].inputs, stack.blocks[0](x))  # cache was fresh in both calls


def test_state_length_must_match_depth():
    with pytest.raises(ValueError, match="3 layers.*2"):
        Stack(_blocks(2))(torch.randn(1, 4, D), state=new_state(3))


def test_checkpointing_changes_neither_outputs_nor_gradients():
    blocks = _blocks(2)
    plain, ckpt = Stack(blocks), Stack(blocks, checkpointing=True)
    x = torch.randn(2, 5, D)
    grads = []
    for s in (plain, ckpt):
        s.zero_grad()
        y = s(x)
        y.square().sum().backward()
        grads.append((y.detach(), [p.grad.clone() for p in s.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b)
