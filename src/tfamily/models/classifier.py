"""A sequence classifier: the language model's trunk (embedding, positions, stack) read out by a
pooling part and a linear head, for tasks whose answer is one class per input (ListOps, MNIST as a
pixel sequence, which corpus a byte window comes from).

The head is a composition, ``ClassHead(pool, proj)``: ``pool`` picks one vector per row from the
stack's output, ``proj`` maps it to class logits. One rule reads a class from every member:

    Under a causal pattern the class is read from the stream at the last real token
    (``LastToken``); under a pattern that sees ahead, from the mean over the real tokens
    (``MeanPool``).

Under a causal pattern (every decoder member: GPT, the sparse members, Longformer, BigBird,
Reformer) the last token is the one position whose view covers the whole input; this is GPT's own
rule for classification (Radford et al. 2018, section 3.3: the final block's activation at the
last token feeds a linear output layer). Inputs are right-padded, so a causal member's real
positions never see the padding and its stack gets no padding mask (which also keeps SDPA on its
causal flash path). A pattern that sees ahead (``full``, an encoder such as BERT, the two-sided
variants of the sparse members in ``spec/variants.py``) gets ``key_padding``, so its real tokens never
attend to padding, and is pooled by the mean over real tokens, Long Range Arena's pooling for its
bidirectional encoders (Tay et al. 2021): under a sparse two-sided pattern no single position need
see the whole input.

The objective's ``pool`` overrides the rule: ``first`` reads BERT's [CLS] (``FirstToken``; Devlin et
al. 2019, section 3: "the final hidden state corresponding to this token is used as the aggregate
sequence representation for classification tasks"), which a fine-tuned BERT or RoBERTa was
pre-trained to fill; the trainer picks it for an imported encoder.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..nn.depth import Depth
from ..nn.embedding import TokenEmbedding
from .hooks import ForwardsHooks
from .trunk import attach_parts, embed_tokens


class LastToken(nn.Module):
    """The stream at each row's last real token: (b, n, d) -> (b, d). ``key_padding`` (b, n) is
    True on real tokens, which come first (right padding); None: every token is real."""

    def forward(self, x: Tensor, key_padding: Tensor | None = None) -> Tensor:
        if key_padding is None:
            return x[:, -1]
        last = key_padding.sum(-1).clamp_min(1) - 1
        return x[torch.arange(x.shape[0], device=x.device), last]


class FirstToken(nn.Module):
    """The stream at each row's first token, BERT's [CLS]: (b, n, d) -> (b, d)."""

    def forward(self, x: Tensor, key_padding: Tensor | None = None) -> Tensor:
        return x[:, 0]


class MeanPool(nn.Module):
    """The mean of the stream over each row's real tokens: (b, n, d) -> (b, d); ``key_padding``
    (b, n) True on real tokens, None: every token is real."""

    def forward(self, x: Tensor, key_padding: Tensor | None = None) -> Tensor:
        if key_padding is None:
            return x.mean(1)
        w = key_padding.to(x.dtype).unsqueeze(-1)
        return (x * w).sum(1) / w.sum(1).clamp_min(1.0)


class ClassHead(nn.Module):
    """``pool`` then ``proj``: (b, n, d) -> (b, n_classes)."""

    def __init__(self, pool: nn.Module, proj: nn.Module):
        super().__init__()
        self.pool, self.proj = pool, proj

    def forward(self, x: Tensor, key_padding: Tensor | None = None) -> Tensor:
        return self.proj(self.pool(x, key_padding))


class Classifier(ForwardsHooks, nn.Module):
    """``embed -> position -> stack -> head``. ``sees_ahead``: whether some layer's pattern lets a
    query see later keys (then the stack needs the padding mask; see the module docstring)."""

    def __init__(self, embed: TokenEmbedding, position: nn.Module, stack: Depth, head: ClassHead,
                 objective: nn.Module, dropout: float = 0.0, embed_norm: nn.Module | None = None,
                 sees_ahead: bool = True, types: nn.Module | None = None):
        super().__init__()
        attach_parts(self, embed, position, stack, head, objective, dropout, embed_norm, types)
        self.sees_ahead = sees_ahead

    def forward(self, tokens: Tensor, *, key_padding: Tensor | None = None,
                token_types: Tensor | None = None) -> Tensor:
        """``tokens``: (b, n) ids -> class logits (b, n_classes); ``token_types``: as ``LanguageModel``'s."""
        x = embed_tokens(self, tokens, 0, token_types)
        x = self.stack(x, key_padding=key_padding if self.sees_ahead else None)
        return self.head(x, key_padding)
