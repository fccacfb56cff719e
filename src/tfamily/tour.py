"""A reading tour of one member: for each axis, the classes that implement its choice
and the paper's equation or section (``tfamily members NAME``).

The classes are read from the member as built (on the meta device, so nothing is
allocated), never from a second list of which class serves which choice; only the
citations are a table here, keyed by class name. A class missing from the table falls
back to the first line of its docstring that cites a year.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import torch
from torch import nn

from .models import EncoderDecoder, LanguageModel, MLMHead
from .models.rnn_encdec import RNNEncoderDecoder
from .nn.attention import Attention
from .nn.block import Block
from .nn.depth import RecurrentStack
from .nn.feedforward import Chunked
from .nn.patterns.adaptive_span import SoftPatternKernel
from .nn.patterns.combine import Intersect, PerHead, Union
from .nn.position import NoPosition
from .nn.position.coordinate import Coordinate
from .spec import Spec

CITATIONS: dict[str, str] = {
    # models and the embedding / head
    "LanguageModel": "Radford et al. 2018, eq. 2: h_0 = U W_e + W_p, h_l = block(h_{l-1}), "
                     "P(u) = softmax(h_n W_e^T); the same wiring serves BERT's encoder (Devlin et al. "
                     "2019, section 3)",
    "EncoderDecoder": "Vaswani et al. 2017, section 3.1 and figure 1: encoder stack, decoder stack "
                      "with cross-attention",
    "TokenEmbedding": "Vaswani et al. 2017, section 3.4: embedding weights multiplied by sqrt(d_model) "
                      "(scale_embeddings); GPT-2 adds them unscaled (Radford et al. 2019)",
    "LMHead": "Vaswani et al. 2017, section 3.4: pre-softmax projection shared with the embedding, "
              "optionally read at s h with s learned from d_model^-0.5 (logit_scale: T5's output "
              "rescaling, Raffel et al. 2020)",
    # init and dropout
    "Normal": "Radford et al. 2019, section 2.3 and GPT-2's released code: weights N(0, 0.02), biases 0, "
              "residual output projections scaled by 1/sqrt(N) for N residual layers",
    "TorchDefault": "each part's own initialisation: PyTorch's nn.Linear default (He et al. 2015's "
                    "uniform bound 1/sqrt(fan_in)), embedding std d^-0.5 read at sqrt(d), position table std 1",
    "Dropout": "Srivastava et al. 2014; where it acts is the member's paper's choice (Vaswani et al. "
               "2017, section 5.4: sublayer outputs and embedding sums)",
    "MLMHead": "Devlin et al. 2019, section 3.1 (masked LM): dense + GELU + LayerNorm, then the "
               "tied vocabulary projection",
    # position
    "Sinusoidal": "Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model))",
    "Learned": "Gehring et al. 2017 learned positions, compared in Vaswani et al. 2017, section 3.5",
    "NoPosition": "Dai et al. 2019, section 3.3: no absolute positions at the input; order enters "
                  "attention as relative distance",
    "Rotary": "Su et al. 2021 (RoFormer), eq. 34: q and k rotated by position-dependent angles, so "
              "q_m . k_n depends on m - n only",
    "RelativePosition": "Dai et al. 2019, section 3.3: A_ij^rel = (a) + (b) + (c) + (d) with u, v and "
                        "W_{k,R}",
    # pattern
    "Full": "Vaswani et al. 2017, section 3.2.3: encoder self-attention sees every position",
    "Causal": "Vaswani et al. 2017, section 3.2.3: decoder masking, illegal connections set to -inf",
    "SlidingWindow": "Beltagy et al. 2020, section 3.1: sliding window attention",
    "GlobalTokens": "Beltagy et al. 2020, section 3.1: global attention on chosen tokens",
    "RandomBlocks": "Zaheer et al. 2020, section 2: r random keys per query (blocked form)",
    "StridedColumns": "Child et al. 2019, section 4.2, strided: A2 = {j : (i - j) mod l = 0}",
    "FixedBlock": "Child et al. 2019, section 4.2, fixed: A1 = {j : floor(j / l) = floor(i / l)}",
    "FixedSummary": "Child et al. 2019, section 4.2, fixed: A2 = {j : j mod l in {l - c, ..., l - 1}}",
    "Local1D": "Parmar et al. 2018, section 3.2: local 1D attention, query blocks with memory blocks",
    "Local2D": "Parmar et al. 2018, section 3.2 and figure 2: local 2D attention",
    "Union": "Child et al. 2019, eq. 4 and Zaheer et al. 2020, eq. 2's graph: a key is allowed "
             "when any part allows it",
    "Intersect": "a key is allowed when every part allows it (Child et al. 2019, section 4.2 "
                 "patterns restricted to the causal half)",
    "PerHead": "Child et al. 2019, eq. 5: separate heads for the factorized parts",
    "AdaptiveSpan": "Sukhbaatar et al. 2019, section 3, eq. 3: m_z(x) = clamp((R + z - x) / R, 0, 1), "
                    "L1 on z",
    # kernel
    "ReferenceKernel": "Vaswani et al. 2017, eq. 1: softmax(Q K^T / sqrt(d_k)) V, dense",
    "SDPAKernel": "Vaswani et al. 2017, eq. 1, computed by the fused flash kernel (Dao et al. 2022)",
    "BlockSparseKernel": "Child et al. 2019, section 5.5: block-sparse attention kernels",
    "FlexKernel": "Child et al. 2019, section 5.5: block-sparse attention, on FlexAttention "
                  "(Dong et al. 2024)",
    "LSHKernel": "Kitaev et al. 2020, section 2, eq. 3-4: angular LSH buckets, sort and chunk",
    "SoftPatternKernel": "Sukhbaatar et al. 2019, section 3: the soft mask enters as log m_z added "
                         "to the scores",
    # heads
    "QKVProjection": "Vaswani et al. 2017, section 3.2.2 (multi-head); shared key/value heads: "
                     "Shazeer 2019 (multi-query), Ainslie et al. 2023 (grouped-query)",
    "SharedQKProjection": "Kitaev et al. 2020, section 2: shared-QK, k_j = q_j / |q_j|",
    # residual and depth
    "RMSNorm": "Zhang & Sennrich 2019, eq. 4: x / RMS(x) * g, LayerNorm without the mean and the bias",
    "PostNorm": "Vaswani et al. 2017, section 3.1: LayerNorm(x + Sublayer(x))",
    "PreNorm": "Xiong et al. 2020 (Pre-LN), as in GPT-2 (Radford et al. 2019, section 2.3): "
               "x + Sublayer(LayerNorm(x))",
    "IdentityMap": "Parisotto et al. 2019, section 3.1 (TrXL-I): x + ReLU(Sublayer(LayerNorm(x)))",
    "InputGate": "Parisotto et al. 2019, section 3.2: g = sigmoid(W_g x) * x + y, y = ReLU(Sublayer(LN(x)))",
    "OutputGate": "Parisotto et al. 2019, section 3.2: g = x + sigmoid(W_g x - b_g) * y",
    "HighwayGate": "Parisotto et al. 2019, section 3.2: g = s * x + (1 - s) * y, s = sigmoid(W_g x + b_g)",
    "SigmoidTanhGate": "Parisotto et al. 2019, section 3.2: g = x + sigmoid(W_g y - b_g) * tanh(U_g y)",
    "GRUGate": "Parisotto et al. 2019, section 3.2 (GTrXL): g = (1 - z) * x + z * tanh(W_g y + U_g (r * x)), "
               "z = sigmoid(W_z y + U_z x - b_g)",
    "Stack": "Vaswani et al. 2017, section 3.1: a stack of N identical layers",
    "ReversibleStack": "Gomez et al. 2017; Kitaev et al. 2020, section 3: y1 = x1 + F(x2), "
                       "y2 = x2 + G(y1)",
    "Universal": "Dehghani et al. 2019, section 2.1: one shared block applied recurrently, "
                 "H^t = Transition(A^t)",
    "UniversalACT": "Dehghani et al. 2019, section 2.2: per-position dynamic halting (ACT, Graves "
                    "2016) with a ponder loss",
    "Coordinate": "Dehghani et al. 2019, section 2.1: coordinate signal P^t, sinusoids of position "
                  "and step added before every step",
    # feed-forward
    "SepConvTransition": "Dehghani et al. 2019, section 2.1: a separable-convolution transition "
                         "(Chollet 2017)",
    "MLP": "Vaswani et al. 2017, eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2 (GELU: Hendrycks & "
           "Gimpel 2016)",
    "GLU": "Shazeer 2020, eq. 6 (SwiGLU with SiLU): FFN(x) = (Swish(x W) * x V) W2, no biases in Llama",
    "Chunked": "Kitaev et al. 2020, section 3: the feed-forward computed in chunks along the sequence",
    # state
    "CacheState": "Vaswani et al. 2017, section 3.2.3: a decoder step sees only earlier positions, "
                  "so their keys and values are cached",
    "SegmentMemory": "Dai et al. 2019, section 3.2: h~ = [SG(h_{t}^{n-1}) o h_{t+1}^{n-1}], "
                     "mem_len layer inputs",
    # recurrent members: the recurrence is the depth and the only path between positions
    "NotUsed": "Elman 1990; Hochreiter & Schmidhuber 1997: a recurrent model carries everything between "
               "positions in its state, so it has no part on this attention axis",
    "RecurrentStack": "Elman 1990, h_t = f(W x_t + U h_{t-1}): a stack of recurrent layers, the state carried "
                      "across segments (truncated BPTT, Williams & Peng 1990)",
    "RNN": "Elman 1990: h_t = tanh(W_ih x_t + W_hh h_{t-1} + b)",
    "LSTM": "Hochreiter & Schmidhuber 1997 (forget gate: Gers et al. 2000): c_t = f c_{t-1} + i g, h_t = o tanh(c_t)",
    "GRU": "Cho et al. 2014, eq. 5-8: reset and update gates, h_t = (1 - z) n + z h_{t-1}",
    "RNNState": "Williams & Peng 1990 (truncated BPTT): the last (h, c) of every layer, detached at each "
                "segment boundary",
    "RNNEncoderDecoder": "Sutskever et al. 2014; Bahdanau et al. 2015; Luong et al. 2015: a recurrent encoder "
                         "read by a recurrent decoder",
    "LuongDecoder": "Luong et al. 2015, section 3, eq. 5-6: the current h_t scores the source, "
                    "h~_t = tanh(W_c [c_t; h_t]); input feeding, section 3.3",
    "BahdanauDecoder": "Bahdanau et al. 2015, eq. 4-6 and A.2.2: s_{i-1} scores the source, c_i enters s_i "
                       "and the readout",
    "DecoderState": "Luong et al. 2015, section 3.3: the stack's (h, c) and h~_{t-1} carried step to step "
                    "(and per beam)",
    "Dot": "Luong et al. 2015, eq. 8: score = h_t^T h_s",
    "ScaledDot": "Vaswani et al. 2017, eq. 1: score = h_t^T h_s / sqrt(d)",
    "General": "Luong et al. 2015, eq. 8: score = h_t^T W_a h_s",
    "Concat": "Luong et al. 2015, eq. 8 (concat) = Bahdanau et al. 2015, eq. 6 (additive): "
              "v_a^T tanh(W_a s + U_a h_j)",
    # objective
    "CausalLM": "Radford et al. 2018, eq. 1: L(U) = sum_i log P(u_i | u_{i-k}, ..., u_{i-1})",
    "MaskedLM": "Devlin et al. 2019, section 3.1: 15% of tokens picked; 80% [MASK], 10% random, "
                "10% kept",
    "Seq2Seq": "Vaswani et al. 2017, section 3: teacher-forced next-token cross-entropy on the target",
}

# A recurrent language model is built from the same LanguageModel, CausalLM and Dropout classes as
# GPT, so citations keyed by class alone quoted GPT's equations for it; these are its own.
RECURRENT_LM_CITATIONS: dict[str, str] = {
    "LanguageModel": "Mikolov et al. 2010, section 2: s(t) = f(U w(t) + W s(t-1)), y(t) = softmax(V s(t)); "
                     "Zaremba et al. 2014, section 3 stacks L layers, h_t^l = cell(h_t^{l-1}, h_{t-1}^l) "
                     "(an LSTM there), the prediction read from h_t^L",
    "CausalLM": "Mikolov et al. 2010, section 2: y(t) is P(w(t+1) | w(t), s(t-1)), trained by cross-entropy "
                "on the next word",
    "Dropout": "Zaremba et al. 2014, section 3.2: dropout on the non-recurrent connections only, "
               "h_t^l = LSTM(D(h_t^{l-1}), h_{t-1}^l)",
}

_YEAR = re.compile(r"\b(19|20)\d\d\b")


@dataclass(frozen=True)
class Stop:
    """One line of the tour: an axis, the spec's choice on it, a class implementing it."""
    axis: str
    choice: str
    cls: type
    citation: str

    @property
    def where(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"


def cite(cls: type, recurrent_lm: bool = False) -> str:
    if recurrent_lm and cls.__qualname__ in RECURRENT_LM_CITATIONS:
        return RECURRENT_LM_CITATIONS[cls.__qualname__]
    if cls.__qualname__ in CITATIONS:
        return CITATIONS[cls.__qualname__]
    for doc in (cls.__doc__, inspect.getmodule(cls).__doc__):
        for line in (doc or "").splitlines():
            if _YEAR.search(line):
                return line.strip()
    return "(no citation: add one to tfamily.tour.CITATIONS)"


def _leaves(pattern) -> list:
    """A pattern and, for a combinator, its parts (depth first)."""
    out = [pattern]
    if isinstance(pattern, (Union, Intersect, PerHead)):
        for part in pattern.patterns:
            out += _leaves(part)
    return out


class NotUsed:
    """An axis the member has no part on (a recurrent model has no attention pattern, kernel,
    heads, residual or feed-forward)."""


def _recurrent_parts(model: nn.Module) -> dict[str, list]:
    unused = [NotUsed()]
    if isinstance(model, RNNEncoderDecoder):
        score = [model.decoder.score] if model.decoder.score is not None else []
        depth, position = [model.encoder, model.decoder, model.decoder.rnn, *score], unused
    else:
        depth = [model.stack, model.stack.rnn]
        position = unused if isinstance(model.position, NoPosition) else [model.position]
    return {"model": [model], "embedding": [model.embed, model.head], "position": position, "pattern": unused,
            "kernel": unused, "heads": unused, "residual": unused, "depth": depth, "state": [model.new_state()],
            "feed_forward": unused, "objective": [model.objective]}


def _parts(model: nn.Module) -> dict[str, list]:
    """axis -> the objects implementing it in ``model``, in reading order. Layers are found
    by type anywhere below the model, so any depth (a stack, a shared block) is read alike."""
    recurrent_lm = isinstance(model, LanguageModel) and isinstance(model.stack, RecurrentStack)
    if recurrent_lm or isinstance(model, RNNEncoderDecoder):
        return _recurrent_parts(model)
    stacks = [model.encoder, model.decoder] if isinstance(model, EncoderDecoder) else [model.stack]
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    attns = [m for m in model.modules() if isinstance(m, Attention)]
    head = [model.head, model.head.out] if isinstance(model.head, MLMHead) else [model.head]
    return {
        "model": [model], "embedding": [model.embed, *head],
        "position": [model.position, *(m for m in model.modules() if isinstance(m, Coordinate)),
                     *(a.position for a in attns if a.position is not None)],
        "pattern": [leaf for a in attns for leaf in _leaves(a.pattern)],
        "kernel": [k for a in attns for k in ([a.kernel, a.kernel.inner] if isinstance(a.kernel, SoftPatternKernel)
                                               else [a.kernel])],
        "heads": [a.proj for a in attns],
        "residual": [b.attn_residual for b in blocks],
        "depth": stacks,
        "state": [model.new_state()],
        "feed_forward": [f for b in blocks for f in ([b.ff, b.ff.inner] if isinstance(b.ff, Chunked) else [b.ff])],
        "objective": [model.objective],
    }


def tour(member: str | Spec) -> list[Stop]:
    """A member (by name, or any spec) as built, axis by axis, each class once per axis."""
    from . import members
    from .build import build, init_scheme
    spec = members.get(member)() if isinstance(member, str) else member
    with torch.device("meta"):
        model = build(spec)
    embedding = ("tied" if spec.tie_embeddings else "untied") + (
        ", x sqrt(d_model)" if spec.scale_embeddings else ", unscaled") + (
        ", learned logit scale" if spec.logit_scale and spec.tie_embeddings else "")
    choices = {"model": spec.model, "embedding": embedding, **spec.choices()}
    parts = {**_parts(model), "init": [init_scheme(spec)], "dropout": [nn.Dropout()]}
    recurrent_lm = isinstance(model, LanguageModel) and isinstance(model.stack, RecurrentStack)
    stops = []
    for axis, objs in parts.items():
        for cls in dict.fromkeys(type(o) for o in objs):
            stops.append(Stop(axis, str(choices[axis]), cls, cite(cls, recurrent_lm)))
    return stops


def render(name: str) -> str:
    """The tour as text: a line per axis (its choice), then a line per class and its citation."""
    from . import members
    lines, last = [f"{name}: {members.REGISTRY[name].paper}"], None
    for s in tour(name):
        if s.axis != last:
            lines.append(f"  {s.axis} = {_short(s.choice)}")
            last = s.axis
        lines.append(f"      {s.where}: {s.citation}")
    m = members.REGISTRY[name]
    if m.base is not None:
        lines.append(f"  changes from the {m.base} base (tfamily.recipes), each from the paper:"
                     if m.changes else f"  the {m.base} base itself (tfamily.recipes)")
        lines += [f"    {c.key} = {_value(c.value)}{' [attention]' if c.attention else ''}: {c.source}"
                  for c in m.changes]
    return "\n".join(lines)


def _value(v) -> str:
    if isinstance(v, dict) and "per_layer" in v:
        return f"{v['name']} x{len(v['per_layer'])} layers"
    return str(v)


def _short(choice: str) -> str:
    # Longformer's per-layer pattern names repeat once per layer.
    parts = choice.split("+")
    return f"{parts[0]} (x{len(parts)} layers)" if len(parts) > 1 and len(set(parts)) == 1 else choice
