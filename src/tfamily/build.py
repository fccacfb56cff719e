"""The only place where specs become modules: every string and flag in a spec is
resolved here into a part, and members differ only in which parts they get."""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .nn.adaptive_span import SOFT_PATTERNS, SoftPatternKernel
from .nn.attention import Attention
from .nn.block import Block
from .nn.depth import Stack
from .nn.embedding import LMHead, TokenEmbedding
from .nn.feedforward import MLP, Chunked
from .nn.memory import SegmentMemory
from .nn.kernels import KERNELS
from .nn.patterns import PATTERNS, Full, Pattern
from .nn.patterns import resolve as resolve_pattern
from .nn.position import ATTENTION_POSITIONS, INPUT_POSITIONS, NoPosition
from .nn.projection import QKVProjection, SharedQKProjection
from .nn.reversible import ReversibleStack
from .nn.residual import RESIDUALS
from .models import EncoderDecoder, LanguageModel, MLMHead
from .objectives import OBJECTIVES
from .spec import Spec


def pattern(spec: Spec, layer: int) -> Pattern:
    p = spec.pattern.for_layer(layer)
    if p.name in SOFT_PATTERNS:  # learned per-head patterns (adaptive span) need the head shape
        return SOFT_PATTERNS[p.name](spec.heads.n_heads, spec.d_head, **p.params)
    # resolve() passes the layer to patterns seeded per layer (BigBird's random blocks)
    # and resolves the sub-specs of union / intersect / per_head.
    return resolve_pattern(p, layer=layer)


def attention(spec: Spec, layer: int, *, pattern_: Pattern | None = None, cross: bool = False) -> Attention:
    proj_cls = SharedQKProjection if spec.heads.shared_qk else QKVProjection
    proj = proj_cls(spec.d_model, spec.heads.n_heads, spec.heads.kv_heads, spec.d_head)
    kernel = KERNELS[spec.kernel.name](**spec.kernel.params)
    pattern_ = pattern_ if pattern_ is not None else pattern(spec, layer)
    if callable(getattr(pattern_, "soften", None)):
        kernel = SoftPatternKernel(kernel)  # the soft pattern trims keys and adds its score bias first
    pos = spec.position
    # Cross-attention queries and keys live in different sequences: no relative positions.
    position = (ATTENTION_POSITIONS[pos.name](spec.d_model, spec.heads.n_heads, spec.d_head, **pos.params)
                if pos.name in ATTENTION_POSITIONS and not cross else None)
    return Attention(proj, kernel, pattern_, spec.d_model, position=position, dropout=spec.attn_dropout)


def feedforward(spec: Spec) -> nn.Module:
    ff = MLP(spec.d_model, spec.d_ff, spec.ff.activation, spec.dropout)
    return Chunked(ff, spec.ff.chunks) if spec.ff.chunks > 1 else ff


def residual(spec: Spec) -> nn.Module:
    return RESIDUALS[spec.residual.name][0](spec.d_model, spec.dropout)


def block(spec: Spec, layer: int, *, pattern_: Pattern | None = None, cross: bool = False) -> Block:
    return Block(attention(spec, layer, pattern_=pattern_), feedforward(spec), residual(spec), residual(spec),
                 cross=attention(spec, layer, pattern_=Full(), cross=True) if cross else None,
                 cross_residual=residual(spec) if cross else None)


def _stack(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, spec: Spec):
    return Stack([blocks(i) for i in range(n_layers)], final_norm, spec.depth.checkpointing)


# name -> constructor(make_block(layer), n_layers, final_norm, spec) -> stack module
DEPTHS: dict = {"stack": _stack}
# Kitaev et al. 2020, section 3: reversible layers built from each block's attention/feed-forward.
DEPTHS["reversible"] = lambda blocks, n_layers, final_norm, spec: ReversibleStack(
    [blocks(i) for i in range(n_layers)], final_norm)


def stack(spec: Spec, n_layers: int, *, pattern_: Pattern | None = None, cross: bool = False) -> nn.Module:
    final_norm = nn.LayerNorm(spec.d_model) if RESIDUALS[spec.residual.name][1] else None
    return DEPTHS[spec.depth.name](lambda i: block(spec, i, pattern_=pattern_, cross=cross),
                                   n_layers, final_norm, spec)


def input_position(spec: Spec) -> nn.Module:
    pos = spec.position
    return INPUT_POSITIONS[pos.name](spec.d_model, pos.max_len) if pos.name in INPUT_POSITIONS else NoPosition()


def _xl_memory(spec: Spec, layers: nn.Module) -> Callable[..., SegmentMemory]:
    # Dai et al. 2019, section 3.2: memory of mem_len layer inputs; a layer whose soft pattern
    # sees fewer keys (adaptive span) keeps only what it can see.
    blocks = list(getattr(layers, "blocks", []))
    limits = [getattr(b.attn.pattern, "memory_needed", None) if hasattr(b, "attn") else None for b in blocks]
    limits = limits if len(limits) == len(layers) else None

    def make(mem_len: int = spec.state.mem_len) -> SegmentMemory:
        return SegmentMemory(len(layers), mem_len, limits)
    return make


# name -> constructor(spec, stack) -> new_state(**kw); states not listed get a KV cache per layer.
STATES: dict = {"xl_memory": _xl_memory}


def _language_model(spec: Spec) -> nn.Module:
    objective = OBJECTIVES[spec.objective.name](spec)
    # Objectives may reserve ids past the data's vocabulary (masked LM's [MASK]).
    rows = spec.vocab_size + getattr(objective, "extra_tokens", 0)
    embed = TokenEmbedding(rows, spec.d_model)
    head = LMHead(spec.d_model, rows, tied=embed if spec.tie_embeddings else None)
    if spec.model == "encoder":
        head = MLMHead(spec.d_model, head)
    layers = stack(spec, spec.depth.n_layers)
    make_state = STATES[spec.state.name](spec, layers) if spec.state.name in STATES else None
    return LanguageModel(embed, input_position(spec), layers, head, objective, spec.dropout,
                         make_state=make_state)


def _encoder_decoder(spec: Spec) -> nn.Module:
    embed = TokenEmbedding(spec.vocab_size, spec.d_model)
    head = LMHead(spec.d_model, spec.vocab_size, tied=embed if spec.tie_embeddings else None)
    n_enc = spec.depth.n_enc_layers or spec.depth.n_layers
    # The encoder sees the whole source; spec.pattern governs decoder self-attention.
    encoder = stack(spec, n_enc, pattern_=Full())
    decoder = stack(spec, spec.depth.n_layers, cross=True)
    return EncoderDecoder(embed, input_position(spec), encoder, decoder, head,
                          OBJECTIVES[spec.objective.name](spec), spec.dropout)


MODELS: dict = {"decoder": _language_model, "encoder": _language_model, "encoder_decoder": _encoder_decoder}


def build(spec: Spec | str) -> nn.Module:
    """Turn a spec (or a member name) into a module."""
    if isinstance(spec, str):
        from . import members
        spec = members.get(spec)()
    if not isinstance(spec, Spec):
        raise TypeError(f"build() takes a Spec or a member name, got {type(spec).__name__}")
    return MODELS[spec.model](spec)
