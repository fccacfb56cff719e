"""Decoder-only LM (GPT-style) and encoder with a masked-LM head (BERT-style).

Both are the same wiring: embed, add input positions, run a stack, project to
the vocabulary. What differs (pattern, objective, head) is passed in.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..nn.depth import Depth
from ..nn.embedding import TokenEmbedding
from ..nn.state import State, new_state
from ..registry import ACTIVATIONS
from .hooks import ForwardsHooks
from .trunk import attach_parts, embed_tokens


class LanguageModel(ForwardsHooks, nn.Module):
    citation = ("Radford et al. 2018, eq. 2: h_0 = U W_e + W_p, h_l = block(h_{l-1}), P(u) = softmax(h_n W_e^T); the "
                "same wiring serves BERT's encoder (Devlin et al. 2019, section 3)")

    def __init__(self, embed: TokenEmbedding, position: nn.Module, stack: Depth, head: nn.Module,
                 objective: nn.Module, dropout: float = 0.0,
                 make_state: Callable[..., State] | None = None, embed_norm: nn.Module | None = None,
                 types: nn.Module | None = None):
        super().__init__()
        attach_parts(self, embed, position, stack, head, objective, dropout, embed_norm, types)
        self.make_state = make_state  # the state axis (build.STATES); None = a KV cache per layer

    def forward(self, tokens: Tensor, *, key_padding: Tensor | None = None,
                state: State | None = None, offset: int | None = None, global_tokens: Tensor | None = None,
                token_types: Tensor | None = None) -> Tensor:
        """``tokens``: (b, n) ids -> logits (b, n, vocab). With ``state`` (``new_state()``:
        a KV cache or XL memory), positions continue from ``state.offset`` unless
        ``offset`` is given. ``global_tokens``: (b, n) bool, the tokens a Longformer's
        global projections serve (``heads.global_qkv``). ``token_types``: (b, n) segment ids
        (BERT's 0 for sentence A, 1 for B) of a model built with ``token_types``; None: all 0."""
        if offset is None:
            offset = 0 if state is None else state.offset
        x = embed_tokens(self, tokens, offset, token_types)
        extra = {} if global_tokens is None else {"global_tokens": global_tokens}
        logits = self.head(self.stack(x, state=state, key_padding=key_padding, **extra))
        if state is not None:
            state.advance(tokens.shape[1])  # e.g. XL: this segment's inputs become the next memory
        return logits

    def new_state(self, **kw) -> State:
        """A fresh state: KV caches, or XL memory (``mem_len=`` overrides the spec's)."""
        if self.make_state is not None:
            return self.make_state(**kw)
        if kw:
            raise ValueError(f"this model's state takes no options, got {sorted(kw)}")
        return new_state(len(self.stack))


class MLMHead(nn.Module):
    """BERT's transform before the tied output projection: dense, ``activation`` (a registered
    name; erf GELU by default), the norm (LayerNorm), then the projection plus a per-token output
    bias (``out_bias``), as BERT's released code has."""
    citation = ("Devlin et al. 2019, section 3.1 (masked LM): dense + GELU + LayerNorm, then the tied vocabulary "
                "projection")

    def __init__(self, d_model: int, out: nn.Module, norm: nn.Module | None = None, out_bias: bool = False,
                 activation: str = "gelu"):
        super().__init__()
        norm = norm if norm is not None else nn.LayerNorm(d_model)
        self.transform = nn.Sequential(nn.Linear(d_model, d_model), ACTIVATIONS[activation](), norm)
        self.out = out
        rows = out.tied.weight.shape[0] if getattr(out, "tied", None) is not None else out.proj.out_features
        self.bias = nn.Parameter(torch.zeros(rows)) if out_bias else None
        self._register_load_state_dict_pre_hook(_zero_bias_if_absent, with_module=True)

    def forward(self, x: Tensor) -> Tensor:
        logits = self.out(self.transform(x))
        return logits if self.bias is None else logits + self.bias


def _zero_bias_if_absent(module: MLMHead, state_dict: dict, prefix: str, *_) -> None:
    """Checkpoints from before the output bias load with it at zero (what it starts at)."""
    if module.bias is not None and prefix + "bias" not in state_dict:
        state_dict[prefix + "bias"] = torch.zeros_like(module.bias)
