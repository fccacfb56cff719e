"""Gathers with cheap backward passes, for the block-sparse kernels' tile layouts.

Autograd's own ``index_select`` backward scatter-adds along an inner dimension, which
ran 10x or more slower on the 2-core CPU than the gathers these replace it with.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


class Take(torch.autograd.Function):
    """``src.index_select(dim, idx)`` whose backward accumulates rows along a leading
    dimension with ``index_put_(accumulate=True)``. Measured on the 2-core CPU (torch
    2.13): autograd's own backward (index_add_ along an inner dimension) took 1.1 s
    for a 25 MB gradient; index_add_ along dim 0 ran 90-125 ms on typical tile shapes,
    index_put_ 15-70 ms."""

    @staticmethod
    def forward(ctx, src: Tensor, dim: int, idx: Tensor) -> Tensor:
        ctx.shape, ctx.dim = src.shape, dim
        ctx.save_for_backward(idx)
        return src.index_select(dim, idx)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        (idx,) = ctx.saved_tensors
        shape, dim = ctx.shape, ctx.dim
        a, n, x = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
        rows = grad.reshape(a, idx.numel(), x).transpose(0, 1).reshape(idx.numel(), a * x)
        out = grad.new_zeros(n, a * x).index_put_((idx,), rows, accumulate=True)
        return out.view(n, a, x).transpose(0, 1).reshape(shape), None, None


class Reorder(torch.autograd.Function):
    """A gather whose gradient is again a gather: ``out = src.index_select(dim, idx)``
    where each source entry is read once per piece (plus padding that reads a real entry
    but gets no gradient). ``pieces``: ``(start, length, back)``: the source gradient is the
    sum over pieces of ``grad.narrow(dim, start, length).index_select(dim, back)``, times
    ``mask`` (along ``dim``) when given. Index_add-free: CPU scatter-adds of many short
    rows ran ~10x slower than gathers here."""

    @staticmethod
    def forward(ctx, src: Tensor, dim: int, idx: Tensor, pieces: tuple, mask: Tensor | None) -> Tensor:
        ctx.dim, ctx.pieces, ctx.mask = dim, pieces, mask
        return src.index_select(dim, idx)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        dim = ctx.dim
        out = None
        for start, length, back in ctx.pieces:
            g = grad.narrow(dim, start, length).index_select(dim, back)
            out = g if out is None else out + g
        if ctx.mask is not None:
            out = out * ctx.mask.view([-1] + [1] * (grad.dim() - dim - 1)).to(out.dtype)
        return out, None, None, None, None


def reorder(src: Tensor, dim: int, idx: Tensor, pieces: tuple, mask: Tensor | None = None) -> Tensor:
    if torch.is_grad_enabled() and src.requires_grad:
        return Reorder.apply(src, dim, idx, pieces, mask)
    return src.index_select(dim, idx)


def permute(src: Tensor, dim: int, order: Tensor) -> Tensor:
    """``src.index_select(dim, order)`` for a permutation ``order``."""
    return reorder(src, dim, order, ((0, order.numel(), torch.argsort(order)),))


def take(src: Tensor, dim: int, idx: Tensor) -> Tensor:
    return Take.apply(src, dim, idx) if torch.is_grad_enabled() and src.requires_grad \
        else src.index_select(dim, idx)
