"""The output head. Vaswani et al. 2017, section 3.4: the pre-softmax projection shares its
weights with the embedding, which is multiplied by sqrt(d_model).

A tied head alone would make an untrained model predict its own input token: at
initialisation the stream is mostly the token's own (scaled) embedding e, so after the
final norm h ~ sqrt(d) e / |e| and its logit h . e = sqrt(d) |e| grows with width while
every other logit is O(1) (loss 18 nats at d 768, V 65, against ln 65 = 4.2). The tied
head therefore reads h / sqrt(d) at the start, as Mesh TensorFlow and T5 do (Raffel et
al. 2020: the decoder output is rescaled by d_model^-0.5 before the shared embedding
matrix): the own-token logit becomes cos(h, e) |e| <= 1 and the first loss is near ln V.
The factor is a learned scalar (like CLIP's logit scale, Radford et al. 2021) starting at
d^-0.5: fixed, it caps every logit near |e| and the model must first grow its embedding
against weight decay (demo shape, 400 steps: validation 2.52 nats fixed, 2.45 with the
old read-back, 2.46 learned). An untied head starts like the tied one's effective weights
e / sqrt(d) (std 1/d), not at nn.Linear's std 1/sqrt(3d), whose logits of std 0.58 would
start 0.17 nats above ln V.

GPT-2 (and BERT) make neither choice: the token table starts at N(0, 0.02) and is added
unscaled to a N(0, 0.02) position table, and the tied head reads the final norm's output
directly (logits of std 0.02 sqrt(d), 0.55 at d 768: the own-token logit stays small
because |e| is). ``scale=False`` and ``learned_scale=False`` give that recipe; the init
axis (``nn/init/``) sets the tables' std.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .token import TokenEmbedding


class LMHead(nn.Module):
    """Pre-softmax projection, tied to the embedding when one is given."""
    citation = ("Vaswani et al. 2017, section 3.4: pre-softmax projection shared with the embedding, optionally read "
                "at s h with s learned from d_model^-0.5 (logit_scale: T5's output rescaling, Raffel et al. 2020)")

    def __init__(self, d_model: int, vocab_size: int, tied: TokenEmbedding | None = None,
                 learned_scale: bool = True):
        super().__init__()
        self.tied = tied
        self.proj = None if tied is not None else nn.Linear(d_model, vocab_size, bias=False)
        if self.proj is not None:
            nn.init.normal_(self.proj.weight, std=1.0 / d_model)
        # See the module docstring: T5's d^-0.5 output rescaling, learned from there on.
        scaled = tied is not None and learned_scale
        self.logit_scale = nn.Parameter(torch.tensor(d_model ** -0.5)) if scaled else None

    def forward(self, x: Tensor) -> Tensor:
        if self.tied is None:
            return self.proj(x)
        if self.logit_scale is not None:
            x = x * self.logit_scale
        return x @ self.tied.weight.t()
