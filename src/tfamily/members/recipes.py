"""The base recipes: one per model kind, each its paper's choices. A member (``members/__init__.py``) is
its base plus the paper's sizes plus only what its paper changes, each change with its source,
so that two members of one kind differ only where their papers do.

- ``decoder``: GPT-2's recipe (Radford et al. 2018 and 2019), as the ``gpt`` member has it.
- ``encoder``: BERT's (Devlin et al. 2019), as ``pretrained/bert.py`` imports it.
- ``encoder_decoder``: the Transformer's (Vaswani et al. 2017).

Each base's ``SOURCES`` entry gives, per choice, the paper's words, or where the paper is silent,
what the base takes and why. The sizes of a base are its paper's base model's; members restate
their own.

Residual scaling under ``init.params.scale_residual`` (GPT-2, section 2.3: N is "the number of
residual layers"): the projections that write into the stream start at std / sqrt(2 L) with L =
``depth.n_layers``, two writes per block. For a weight-shared depth (the Universal Transformer) L
counts applications of the shared block, so the scale follows the number of sublayer outputs
summed into the stream (2 T), not the number of distinct weights. A reversible stack (the
Reformer) also sums 2 L outputs: x1 collects the L attention outputs and x2 the L feed-forward
outputs, and the model reads both, so it takes the same 1 / sqrt(2 L).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

_GPT1 = "Radford et al. 2018, section 4.1"
_GPT2 = "Radford et al. 2019, section 2.3"
_VASWANI = "Vaswani et al. 2017"
_BERT = "Devlin et al. 2019"

DECODER = dict(
    model="decoder", d_model=768, dropout=0.1, embed_dropout=None, attn_dropout=None, ff_dropout=0.0,
    tie_embeddings=True, scale_embeddings=False, logit_scale=False, bias=True,
    init={"name": "normal", "params": {"std": 0.02, "scale_residual": True}},
    pattern={"name": "causal"}, kernel={"name": "sdpa"}, position={"name": "learned", "max_len": 1024},
    heads={"n_heads": 12}, residual={"name": "pre_norm"}, norm={"name": "layer_norm"},
    depth={"name": "stack", "n_layers": 12}, state={"name": "kv_cache"},
    ff={"name": "mlp", "activation": "gelu_tanh"}, objective={"name": "causal_lm"})

ENCODER = dict(
    model="encoder", d_model=768, dropout=0.1, embed_dropout=None, attn_dropout=None, ff_dropout=0.0,
    tie_embeddings=True, scale_embeddings=False, logit_scale=False, bias=True,
    init={"name": "normal", "params": {"std": 0.02, "scale_residual": False}},
    pattern={"name": "full"}, kernel={"name": "sdpa"}, position={"name": "learned", "max_len": 512},
    heads={"n_heads": 12}, residual={"name": "post_norm"}, norm={"name": "layer_norm", "embed": True},
    depth={"name": "stack", "n_layers": 12}, state={"name": "kv_cache"},
    ff={"name": "mlp", "activation": "gelu"}, objective={"name": "masked_lm"})

ENCODER_DECODER = dict(
    model="encoder_decoder", d_model=512, dropout=0.1, embed_dropout=None, attn_dropout=0.0, ff_dropout=0.0,
    tie_embeddings=True, scale_embeddings=True, logit_scale=False, bias=True,
    init={"name": "torch"}, pattern={"name": "causal"}, kernel={"name": "sdpa"},
    position={"name": "sinusoidal"}, heads={"n_heads": 8}, residual={"name": "post_norm"},
    norm={"name": "layer_norm"}, depth={"name": "stack", "n_layers": 6}, state={"name": "kv_cache"},
    ff={"name": "mlp", "d_ff": 2048, "activation": "relu"}, objective={"name": "seq2seq"})

BASES = {"decoder": DECODER, "encoder": ENCODER, "encoder_decoder": ENCODER_DECODER}

SOURCES: dict[str, dict[str, str]] = {
    "decoder": {
        "init": f"{_GPT1}: \"a simple weight initialization of N(0, 0.02) was sufficient\"; {_GPT2}: \"We scale "
                f"the weights of residual layers at initialization by a factor of 1/sqrt(N) where N is the number "
                f"of residual layers\"",
        "dropout": f"{_GPT1}: \"residual, embedding, and attention dropouts with a rate of 0.1\"; none on the "
                   f"feed-forward hidden, as GPT-2's released code",
        "activation": f"{_GPT1}: \"For the activation function, we used the Gaussian Error Linear Unit (GELU)\"; "
                      f"its tanh form is GPT-2's released code",
        "position": f"{_GPT1}: \"We used learned position embeddings instead of the sinusoidal version proposed "
                    f"in the original work\"",
        "residual": f"{_GPT2}: \"Layer normalization was moved to the input of each sub-block, similar to a "
                    f"pre-activation residual network\"",
        "embedding": f"{_GPT1}, eq. 2: h_0 = U W_e + W_p and P(u) = softmax(h_n W_e^T): unscaled, a tied head "
                     f"without a scale",
    },
    "encoder": {
        "init": f"{_BERT} is silent; its released code starts every weight at N(0, 0.02) (initializer_range), "
                f"biases zero, with no residual scaling",
        "dropout": f"{_BERT}, appendix A.2: \"We use a dropout probability of 0.1 on all layers\" (the released "
                   f"code: embeddings, attention probabilities, sublayer outputs; none on the feed-forward hidden)",
        "activation": f"{_BERT}, appendix A.2: \"We use a gelu activation ... rather than the standard relu, "
                      f"following OpenAI GPT\" (erf GELU in the released code)",
        "position": f"{_BERT}, section 3: \"its input representation is constructed by summing the corresponding "
                    f"token, segment, and position embeddings\" (learned tables)",
        "residual": f"{_BERT}, section 3: \"based on the original implementation described in Vaswani et al. "
                    f"(2017)\": post-norm",
        "embedding": f"{_BERT} is silent on scaling; the released code adds the tables unscaled and applies a "
                     f"LayerNorm to the sum, and the masked-LM output shares the token table",
    },
    "encoder_decoder": {
        "init": f"{_VASWANI} is silent; PyTorch's defaults are kept: the token table at std d^-0.5, so "
                f"the sqrt(d_model)-scaled input has unit variance, the scale of the sinusoids",
        "dropout": f"{_VASWANI}, section 5.4: \"We apply dropout to the output of each sub-layer, before it is "
                   f"added to the sub-layer input and normalized. In addition, we apply dropout to the sums of the "
                   f"embeddings and the positional encodings\"; silent on attention probabilities and the "
                   f"feed-forward hidden, which take none",
        "activation": f"{_VASWANI}, section 3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2",
        "position": f"{_VASWANI}, section 3.5: sine and cosine functions of different frequencies",
        "residual": f"{_VASWANI}, section 3.1: \"the output of each sub-layer is LayerNorm(x + Sublayer(x))\"",
        "embedding": f"{_VASWANI}, section 3.4: \"we share the same weight matrix between the two embedding layers "
                     f"and the pre-softmax linear transformation ... In the embedding layers, we multiply those "
                     f"weights by sqrt(d_model)\"; no learned scale on the logits",
    },
}


@dataclass(frozen=True)
class Change:
    """One way a member departs from its base: the spec ``key`` it sets (dotted, as an override;
    an axis dict with a ``name`` replaces that axis), the ``value``, and ``source``: the paper's
    section and words. ``attention``: part of the attention mechanism (pattern, kernel, shared-QK
    heads, a reversible depth), what a controlled comparison keeps from the member."""
    key: str
    value: Any
    source: str
    attention: bool = False


def attention(key: str, value: Any, source: str) -> Change:
    return Change(key, value, source, attention=True)


def base(kind: str) -> dict:
    """A copy of the base recipe of model kind ``kind``."""
    if kind not in BASES:
        raise ValueError(f"unknown base {kind!r}; valid: {', '.join(BASES)}")
    return copy.deepcopy(BASES[kind])
