"""``Stack`` runs N distinct layers, optionally with activation checkpointing (Chen et al.
2016) to trade compute for memory."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..state import LayerState
from ...registry import DEPTHS


class Stack(nn.Module):
    citation = "Vaswani et al. 2017, section 3.1: a stack of N identical layers"

    def __init__(self, blocks: Sequence[nn.Module], final_norm: nn.Module | None = None,
                 checkpointing: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm if final_norm is not None else nn.Identity()
        self.checkpointing = checkpointing

    def __len__(self) -> int:
        return len(self.blocks)

    def forward(self, x: Tensor, *, state: Sequence[LayerState] | None = None, offset=None, **kw) -> Tensor:
        """``x``: (b, n, d); ``state``: one LayerState per layer (caches, memory) or None.
        Each layer's input is recorded in its state, for the next segment's XL memory.
        ``offset`` is not used: the positions were added to ``x`` at the input."""
        if state is not None and len(state) != len(self.blocks):
            raise ValueError(f"state has {len(state)} layers but the stack has {len(self.blocks)}")
        for i, block in enumerate(self.blocks):
            s = state[i] if state is not None else None
            if s is not None:
                s.record(x)
            if self.checkpointing and self.training and s is None:
                x = checkpoint(block, x, use_reentrant=False, **kw)
            else:
                x = block(x, state=s, **kw)
        return self.final_norm(x)


def stack(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None,
          checkpointing: bool) -> Stack:
    # Vaswani et al. 2017, section 3.1: N distinct layers; ``blocks(i)`` builds layer i.
    return Stack([blocks(i) for i in range(n_layers)], final_norm, checkpointing)


DEPTHS.register("stack", stack, needs=("blocks", "n_layers", "final_norm", "checkpointing"))
