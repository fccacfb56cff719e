"""The reversible stack (Gomez et al. 2017, RevNet; Kitaev et al. 2020, section 3).

Each layer maps a pair of streams (x1, x2) to (y1, y2) with

    y1 = x1 + F(x2),   y2 = x2 + G(y1)          (Kitaev et al. 2020, eq. 7)

where F is the attention branch and G the feed-forward branch, each with its
residual part's ``pre`` (the norm) and the dropout of its ``post``. The inverse
x2 = y2 - G(y1), x1 = y1 - F(x2) recovers every layer's inputs from its outputs,
so the backward pass rebuilds activations layer by layer from the top instead of
storing them: activation memory does not grow with depth. The stack's input is
duplicated into both streams and the output is their mean, as in the authors'
trax ReformerLM.

The recomputation replays the random state of the forward pass (CPU and, on
CUDA, the device generator) so dropout masks and LSH rotations are the same in
both passes. Parameter gradients are accumulated into ``.grad`` inside the
backward pass, layer by layer, so at most one layer's gradient graph exists at a
time; ``torch.autograd.grad(loss, params)`` therefore does not see them (use
``loss.backward()``), while gradients with respect to the stack's input flow as usual.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ..feedforward import own_padding
from ..state import LayerState
from ...registry import DEPTHS


def _branch(residual: nn.Module, sublayer, x: Tensor, **kw) -> Tensor:
    # An additive residual's post(x, y) = x + dropout(y), so post(0, y) is the branch alone.
    return residual.post(x.new_zeros(()), sublayer(residual.pre(x), **kw))


def attention_branch(block: nn.Module, x2: Tensor, key_padding: Tensor | None = None,
                     state: LayerState | None = None) -> Tensor:
    """F(x2): the block's self-attention with its residual's norm and dropout."""
    cache = state.cache if state is not None else None
    memory, key_padding = state.attention_memory(key_padding, x2) if state is not None else (None, key_padding)
    if memory is not None:
        memory = block.attn_residual.pre(memory)
    return _branch(block.attn_residual, block.attn, x2, key_padding=key_padding, cache=cache, memory=memory)


def feedforward_branch(block: nn.Module, y1: Tensor, key_padding: Tensor | None = None,
                       state: LayerState | None = None) -> Tensor:
    """G(y1): the block's feed-forward with its residual's norm and dropout (and, like the
    attention branch, the layer's state and padding: a convolution carries and skips pads)."""
    return _branch(block.ff_residual, block.ff, y1, state=state, padding=own_padding(key_padding, y1.shape[1]))


class _RNGState:
    """The generators' state at one point of the forward pass, to be replayed."""

    def __init__(self, device: torch.device):
        self.cpu = torch.get_rng_state()
        self.device = device if device.type == "cuda" else None
        self.cuda = torch.cuda.get_rng_state(device) if self.device is not None else None

    @contextmanager
    def replay(self):
        with torch.random.fork_rng(devices=[self.device] if self.device is not None else []):
            torch.set_rng_state(self.cpu)
            if self.device is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


class _ReversibleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, blocks, key_padding, *params):
        rng = []
        for block in blocks:  # autograd is off inside Function.forward: nothing is stored
            rf = _RNGState(x1.device)
            x1 = x1 + attention_branch(block, x2, key_padding)
            rg = _RNGState(x1.device)
            x2 = x2 + feedforward_branch(block, x1, key_padding)
            rng.append((rf, rg))
        ctx.blocks, ctx.key_padding, ctx.rng = blocks, key_padding, rng
        ctx.autocast = (x1.device.type, torch.is_autocast_enabled(x1.device.type),
                        torch.get_autocast_dtype(x1.device.type))
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        device_type, enabled, dtype = ctx.autocast
        for block, (rf, rg) in zip(reversed(ctx.blocks), reversed(ctx.rng)):
            with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
                y1 = y1.detach().requires_grad_()
                with rg.replay():
                    g = feedforward_branch(block, y1, ctx.key_padding)
                torch.autograd.backward(g, dy2)  # G's parameter grads accumulate here
            with torch.no_grad():
                x2 = y2 - g
                dy1 = dy1 + y1.grad
            del g
            with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
                x2 = x2.detach().requires_grad_()
                with rf.replay():
                    f = attention_branch(block, x2, ctx.key_padding)
                torch.autograd.backward(f, dy1)
            with torch.no_grad():
                x1 = y1 - f
                dy2 = dy2 + x2.grad
            y1, y2 = x1.detach(), x2.detach()
        return (dy1, dy2, None, None) + (None,) * (len(ctx.needs_input_grad) - 4)


class ReversibleStack(nn.Module):
    """N blocks run as reversible layers. Each block provides ``attn``, ``ff`` and their
    additive residual parts ``attn_residual``/``ff_residual`` (pre-norm); cross-attention
    has no place in the two-stream form and is refused. ``recompute=False`` runs the same
    layers as a plain two-stream stack with stored activations (used with caches/XL
    memory, and as the reference the recomputing path is tested against)."""
    citation = "Gomez et al. 2017; Kitaev et al. 2020, section 3: y1 = x1 + F(x2), y2 = x2 + G(y1)"

    def __init__(self, blocks: Sequence[nn.Module], final_norm: nn.Module | None = None,
                 recompute: bool = True):
        super().__init__()
        for i, block in enumerate(blocks):
            missing = [a for a in ("attn", "ff", "attn_residual", "ff_residual") if not hasattr(block, a)]
            if missing:
                raise TypeError(f"reversible layer {i} ({type(block).__name__}) lacks {missing}; "
                                f"it needs an attention and a feed-forward with their residual parts")
            if getattr(block, "cross", None) is not None:
                raise ValueError(f"reversible layer {i} has cross-attention; the reversible stack "
                                 f"pairs one attention with one feed-forward (use depth 'stack')")
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm if final_norm is not None else nn.Identity()
        self.recompute = recompute

    def __len__(self) -> int:
        return len(self.blocks)

    def forward(self, x: Tensor, *, state: Sequence[LayerState] | None = None,
                key_padding: Tensor | None = None, context: Tensor | None = None,
                context_padding: Tensor | None = None, offset=None) -> Tensor:
        """``x``: (b, n, d) -> (b, n, d). ``state``: one LayerState per layer (KV cache, XL
        memory over the attention stream x2) or None. ``offset`` is not used (positions are
        added at the input)."""
        if context is not None:
            raise ValueError("the reversible stack has no cross-attention; got a context")
        if state is not None and len(state) != len(self.blocks):
            raise ValueError(f"state has {len(state)} layers but the stack has {len(self.blocks)}")
        params = [p for p in self.parameters() if p.requires_grad]
        if self.recompute and state is None and torch.is_grad_enabled() and (x.requires_grad or params):
            y1, y2 = _ReversibleFunction.apply(x, x, list(self.blocks), key_padding, *params)
        else:
            y1, y2 = self.two_stream(x, state=state, key_padding=key_padding)
        return self.final_norm((y1 + y2) / 2)

    def two_stream(self, x: Tensor, *, state: Sequence[LayerState] | None = None,
                   key_padding: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The same layers with ordinary autograd (activations stored)."""
        x1 = x2 = x
        for i, block in enumerate(self.blocks):
            s = state[i] if state is not None else None
            if s is not None:
                s.record(x2)  # the attention stream: next segment's XL memory
            x1 = x1 + attention_branch(block, x2, key_padding, s)
            x2 = x2 + feedforward_branch(block, x1, key_padding, s)
        return x1, x2


def reversible(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None) -> ReversibleStack:
    # Kitaev et al. 2020, section 3: reversible layers built from each block's attention/feed-forward.
    return ReversibleStack([blocks(i) for i in range(n_layers)], final_norm)


DEPTHS.register("reversible", reversible, needs=("blocks", "n_layers", "final_norm"))
