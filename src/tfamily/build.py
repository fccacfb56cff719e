"""The only place where specs become modules: every string and flag in a spec is
resolved here into a part, and members differ only in which parts they get.

Parts are constructed through their axis registry (``tfamily/registry.py``), which
supplies each constructor the sizes it ``needs``; the depth, state, objective and model
axes, whose constructors assemble several parts, register here.
"""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from . import checks  # noqa: F401  (registers the spec checks that need parts)
from .models import (Classifier, ClassHead, DualEncoder, EncoderDecoder, FirstToken, LanguageModel, LastToken,
                     MeanPool, MLMHead, PairHead)
from .models.rnn_decoders import BahdanauDecoder, LuongDecoder
from .models.rnn_encdec import RNNEncoderDecoder
from .nn.attention import Attention
from .nn.block import Block
from .nn.depth import (CELLS, HaltingUnit, RecurrentStack, ReversibleStack, Stack, Universal, UniversalACT,
                       make_rnn)
from .nn.embedding import LMHead, NoTokenTypes, TokenEmbedding, TokenTypes
from .nn.feedforward import Chunked
from .nn.heads import QKVProjection
from .nn.heads.global_qkv import GlobalTokenAttention
from .nn.init import InitScheme, init_linears
from .nn.patterns import Full, Pattern, SoftPattern, SoftPatternKernel
from .nn.patterns import resolve as resolve_pattern
from .nn.position import NoPosition
from .nn.position.coordinate import Coordinate
from .nn.state import SegmentMemory
from .objectives import AuxiliaryLosses, CausalLM, Classification, MaskedLM, ReservesIds, Seq2Seq, SpanCorruption
from .registry import (ALIGNMENTS, DEPTHS, FEEDFORWARDS, HEADS, INITS, KERNELS, MEMBERS, MODELS, NORMS,
                       OBJECTIVES, PATTERNS, POSITIONS, RESIDUALS, STATES)
from .sizes import check_fits
from .spec import Spec


def pattern(spec: Spec, layer: int) -> Pattern:
    p = spec.pattern.for_layer(layer)
    entry = PATTERNS.entry(p.name)
    if entry.needs:  # learned per-head patterns (adaptive span) need the head shape
        return PATTERNS.make(p.name, p.params, n_heads=spec.heads.n_heads, d_head=spec.d_head)
    # resolve() passes the layer to patterns seeded per layer (BigBird's random blocks)
    # and resolves the sub-specs of union / intersect / per_head.
    return resolve_pattern(p, layer=layer)


def init_scheme(spec: Spec) -> InitScheme:
    return INITS.make(spec.init.name, spec.init.params, n_layers=spec.depth.n_layers)


def position(spec: Spec, causal: bool) -> nn.Module | None:
    """The in-attention position part (relative, rotary, T5's buckets), or None for an input-stage one."""
    pos = spec.position
    if POSITIONS.entry(pos.name).info["stage"] != "attention":
        return None
    return POSITIONS.make(pos.name, pos.params, d_model=spec.d_model, n_heads=spec.heads.n_heads,
                          d_head=spec.d_head, causal=causal)


def attention(spec: Spec, layer: int, *, pattern_: Pattern | None = None, cross: bool = False,
              position_: nn.Module | None = None) -> Attention:
    proj = HEADS.make("shared_qk" if spec.heads.shared_qk else "qkv", d_model=spec.d_model,
                      n_heads=spec.heads.n_heads, n_kv_heads=spec.heads.kv_heads, d_head=spec.d_head,
                      bias=spec.bias)
    kernel = KERNELS.make(spec.kernel.name, spec.kernel.params)
    pattern_ = pattern_ if pattern_ is not None else pattern(spec, layer)
    if isinstance(pattern_, SoftPattern):
        kernel = SoftPatternKernel(kernel)  # the soft pattern trims keys and adds its score bias first
    # Cross-attention queries and keys live in different sequences: no relative positions.
    # ``position_``: one part shared by every layer of a stack (T5's bucket table).
    pos = None if cross else position_ if position_ is not None else position(spec, pattern_.causal)
    attn = Attention(proj, kernel, pattern_, spec.d_model, position=pos, dropout=spec.dropout_at("attn"),
                     bias=spec.bias, scale=spec.heads.scale)
    scheme = init_scheme(spec)
    init_linears(scheme, proj, None)
    scheme.linear(attn.out_proj, writes_residual=True)
    if spec.heads.global_qkv and not cross:  # Beltagy et al. 2020, section 3.1: Q_g, K_g, V_g
        global_proj = QKVProjection(spec.d_model, spec.heads.n_heads, spec.heads.kv_heads, spec.d_head, spec.bias)
        init_linears(scheme, global_proj, None)
        return GlobalTokenAttention(attn, global_proj)
    return attn


def feedforward(spec: Spec, causal: bool) -> nn.Module:
    # causal: the block's attention pattern never looks ahead (a decoder), so a part that mixes
    # positions (the separable convolution) must not either; a position-wise part ignores it.
    ff = FEEDFORWARDS.make(spec.ff.name, spec.ff.params, d_model=spec.d_model, d_ff=spec.d_ff,
                           activation=spec.ff.activation, dropout=spec.dropout_at("ff"), causal=causal,
                           bias=spec.bias)
    init_linears(init_scheme(spec), ff, getattr(ff, "out_proj", None))
    return Chunked(ff, spec.ff.chunks) if spec.ff.chunks > 1 else ff


def norm(spec: Spec) -> nn.Module:
    return NORMS.make(spec.norm.name, spec.norm.params, d_model=spec.d_model, bias=spec.bias)


def residual(spec: Spec) -> nn.Module:
    return RESIDUALS.make(spec.residual.name, spec.residual.params, d_model=spec.d_model, dropout=spec.dropout,
                          bias=spec.bias, norm=norm(spec))


def block(spec: Spec, layer: int, *, pattern_: Pattern | None = None, cross: bool = False,
          position_: nn.Module | None = None) -> Block:
    attn = attention(spec, layer, pattern_=pattern_, position_=position_)
    return Block(attn, feedforward(spec, attn.pattern.causal), residual(spec), residual(spec),
                 cross=attention(spec, layer, pattern_=Full(), cross=True) if cross else None,
                 cross_residual=residual(spec) if cross else None)


def _stack(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, spec: Spec):
    return Stack([blocks(i) for i in range(n_layers)], final_norm, spec.depth.checkpointing)


def _reversible(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, spec: Spec):
    # Kitaev et al. 2020, section 3: reversible layers built from each block's attention/feed-forward.
    return ReversibleStack([blocks(i) for i in range(n_layers)], final_norm)


def _universal(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, spec: Spec):
    # Dehghani et al. 2019: one block shared by all T = n_layers recurrent steps, the
    # coordinate signal (eq. 6-7) added before each.
    return Universal(blocks(0), Coordinate(spec.d_model), n_layers, final_norm)


def _universal_act(blocks: Callable[[int], nn.Module], n_layers: int, final_norm: nn.Module | None, spec: Spec,
                   eps: float = 0.01, ponder_weight: float = 0.01, halting_bias: float = 1.0):
    # Dehghani et al. 2019, section 2.2 with tensor2tensor's halting: n_layers is max_steps.
    return UniversalACT(blocks(0), Coordinate(spec.d_model), HaltingUnit(spec.d_model, halting_bias), n_layers,
                        eps=eps, ponder_weight=ponder_weight, final_norm=final_norm)


_DEPTH_NEEDS = ("blocks", "n_layers", "final_norm", "spec")
DEPTHS.register("stack", _stack, needs=_DEPTH_NEEDS)
DEPTHS.register("reversible", _reversible, needs=_DEPTH_NEEDS)
# shared: one block serves every step (no per-layer inputs for XL memory, nothing to checkpoint per layer)
DEPTHS.register("universal", _universal, needs=_DEPTH_NEEDS, shared=True)
DEPTHS.register("universal_act", _universal_act, needs=_DEPTH_NEEDS, shared=True)


def stack(spec: Spec, n_layers: int, *, pattern_: Pattern | None = None, cross: bool = False) -> nn.Module:
    final = RESIDUALS.entry(spec.residual.name).info["final_norm"]
    # A position part marked shared is built once per stack (T5: layer 0's bias serves every layer),
    # causal when the stack's first layer is.
    shared = None
    if POSITIONS.entry(spec.position.name).info.get("shared"):
        shared = position(spec, (pattern_ if pattern_ is not None else pattern(spec, 0)).causal)
    return DEPTHS.make(spec.depth.name, spec.depth.params,
                       blocks=lambda i: block(spec, i, pattern_=pattern_, cross=cross, position_=shared),
                       n_layers=n_layers,
                       final_norm=norm(spec) if final else None, spec=spec)


def input_position(spec: Spec) -> nn.Module:
    pos = spec.position
    if POSITIONS.entry(pos.name).info["stage"] != "input":
        return NoPosition()
    position = POSITIONS.make(pos.name, pos.params, d_model=spec.d_model, max_len=pos.max_len)
    table = getattr(position, "table", None)
    if isinstance(table, nn.Embedding):
        init_scheme(spec).table(table.weight)
    return position


def _xl_memory(spec: Spec, layers: nn.Module) -> Callable[..., SegmentMemory]:
    # Dai et al. 2019, section 3.2: memory of mem_len layer inputs; a layer whose soft pattern
    # sees fewer keys (adaptive span) keeps only what it can see.
    patterns = [b.attn.pattern for b in layers.blocks]
    limits = [p.memory_needed if isinstance(p, SoftPattern) else None for p in patterns]

    def make(mem_len: int = spec.state.mem_len) -> SegmentMemory:
        return SegmentMemory(len(layers), mem_len, limits)
    return make


def _per_call(spec: Spec, layers: nn.Module) -> None:
    # Nothing crosses calls; decoding still builds its KV cache per layer (models/generate.py).
    return None


# name -> constructor(spec, stack) -> new_state(**kw) | None (the model's KV cache per layer).
STATES.register("none", _per_call, needs=("spec", "layers"))
STATES.register("kv_cache", _per_call, needs=("spec", "layers"))
# carried: the state crosses segments, so the trainer streams contiguous segments for it (train/resolve.py).
STATES.register("xl_memory", _xl_memory, needs=("spec", "layers"), carried=True)

# models: the model kinds an objective trains; the spec refuses other pairs.
OBJECTIVES.register("causal_lm", lambda: CausalLM(), models=("decoder",))
OBJECTIVES.register("masked_lm", MaskedLM, needs=("vocab_size",), models=("encoder",))
OBJECTIVES.register("seq2seq", lambda: Seq2Seq(), models=("encoder_decoder",))
OBJECTIVES.register("span_corruption", SpanCorruption, needs=("vocab_size",), models=("encoder_decoder",))
# Al-Rfou et al. 2019: causal LM plus per-layer classifiers, cut off as training progresses.
OBJECTIVES.register("al_rfou", AuxiliaryLosses, needs=("vocab_size", "d_model", "n_layers"), models=("decoder",))
OBJECTIVES.register("classification", Classification, models=("classifier", "dual_encoder"))


def objective(spec: Spec) -> nn.Module:
    return OBJECTIVES.make(spec.objective.name, spec.objective.params, vocab_size=spec.vocab_size,
                           d_model=spec.d_model, n_layers=spec.depth.n_layers)


def _rows(spec: Spec, objective_: nn.Module) -> int:
    # Objectives may reserve ids past the data's vocabulary ([MASK], T5's sentinels).
    return spec.vocab_size + (objective_.extra_tokens if isinstance(objective_, ReservesIds) else 0)


def embedding_and_head(spec: Spec, rows: int) -> tuple[TokenEmbedding, LMHead]:
    embed = TokenEmbedding(rows, spec.d_model, scale=spec.scale_embeddings)
    head = LMHead(spec.d_model, rows, tied=embed if spec.tie_embeddings else None, learned_scale=spec.logit_scale)
    scheme = init_scheme(spec)
    scheme.table(embed.weight)
    if head.proj is not None:
        scheme.table(head.proj.weight)
    return embed, head


def token_types(spec: Spec) -> nn.Module:
    if not spec.token_types:
        return NoTokenTypes()
    types = TokenTypes(spec.token_types, spec.d_model)
    init_scheme(spec).table(types.weight)
    return types


def _mlm_activation(spec: Spec) -> str:
    # BERT's released code (run_pretraining.py, get_masked_lm_output) applies hidden_act in the
    # MLM head too, so a tanh-GELU feed-forward (BigBird's released gelu_new) has a tanh-GELU head.
    # Other feed-forward activations keep the erf GELU head models were trained with before.
    return "gelu_tanh" if spec.ff.activation == "gelu_tanh" else "gelu"


def _language_model(spec: Spec) -> nn.Module:
    objective_ = objective(spec)
    rows = _rows(spec, objective_)
    embed, head = embedding_and_head(spec, rows)
    if spec.model == "encoder":
        head = MLMHead(spec.d_model, head, norm(spec), out_bias=spec.bias, activation=_mlm_activation(spec))
    layers = stack(spec, spec.depth.n_layers)
    make_state = STATES.make(spec.state.name, spec.state.params, spec=spec, layers=layers)
    return LanguageModel(embed, input_position(spec), layers, head, objective_, spec.dropout_at("embed"),
                         make_state=make_state, embed_norm=norm(spec) if spec.norm.embed else None,
                         types=token_types(spec))


def _trunk(spec: Spec, objective_: nn.Module | None, head_of) -> Classifier:
    # The member's trunk, pooled by the rule of models/classifier.py: the last real token under a
    # causal pattern, the mean over real tokens under one that sees ahead; the objective's pool wins.
    embed = TokenEmbedding(spec.vocab_size, spec.d_model, scale=spec.scale_embeddings)
    init_scheme(spec).table(embed.weight)
    sees_ahead = not all(pattern(spec, i).causal for i in range(spec.depth.n_layers))
    rule = "mean" if sees_ahead else "last"
    pool = objective_.pool if isinstance(objective_, Classification) and objective_.pool else rule
    head = ClassHead(POOLS[pool](), head_of(spec))
    return Classifier(embed, input_position(spec), stack(spec, spec.depth.n_layers), head, objective_,
                      spec.dropout_at("embed"), norm(spec) if spec.norm.embed else None, sees_ahead,
                      types=token_types(spec))


POOLS = {"first": FirstToken, "last": LastToken, "mean": MeanPool}


def _classifier(spec: Spec) -> nn.Module:
    objective_ = objective(spec)
    return _trunk(spec, objective_, lambda s: nn.Linear(s.d_model, objective_.n_classes))


def _dual_encoder(spec: Spec) -> nn.Module:
    # models/dual_encoder.py: one trunk for both inputs, [u, v, u * v, u - v] into an MLP.
    objective_ = objective(spec)
    encoder = _trunk(spec, None, lambda s: nn.Identity())
    return DualEncoder(encoder, PairHead(spec.d_model, objective_.n_classes), objective_)


def _encoder_decoder(spec: Spec) -> nn.Module:
    objective_ = objective(spec)
    rows = _rows(spec, objective_)
    embed, head = embedding_and_head(spec, rows)
    n_enc = spec.depth.n_enc_layers or spec.depth.n_layers
    # The encoder sees the whole source; spec.pattern governs decoder self-attention.
    encoder = stack(spec, n_enc, pattern_=Full())
    decoder = stack(spec, spec.depth.n_layers, cross=True)
    return EncoderDecoder(embed, input_position(spec), encoder, decoder, head,
                          objective_, spec.dropout_at("embed"))


# -- recurrent depths: one torch.nn RNN/LSTM/GRU is the whole stack (nn/depth/recurrent.py);
# as an encoder-decoder, its params choose how the decoder reads the encoder (models/rnn_encdec.py).
RNN_OPTIONS = {"bidirectional": False, "alignment": "general", "attend": "luong", "input_feeding": True}


def _recurrent(cell: str) -> Callable[..., nn.Module]:
    def make(spec: Spec, n_layers: int, bidirectional: bool = RNN_OPTIONS["bidirectional"],
             alignment: str = RNN_OPTIONS["alignment"], attend: str = RNN_OPTIONS["attend"],
             input_feeding: bool = RNN_OPTIONS["input_feeding"]) -> nn.Module:
        # A decoder-only model's stack; checks.check_recurrent refuses the encoder-decoder options there.
        return RecurrentStack(make_rnn(cell, spec.d_model, spec.d_model, n_layers, dropout=spec.dropout))
    return make


for _cell in CELLS:
    DEPTHS.register(_cell, _recurrent(_cell), needs=("spec", "n_layers"), recurrent=True)
STATES.register("rnn_hidden", lambda spec, layers: layers.new_state, needs=("spec", "layers"), carried=True)


def _rnn_encoder_decoder(spec: Spec) -> nn.Module:
    o = {**RNN_OPTIONS, **spec.depth.params}
    cell, d, n_dec = spec.depth.name, spec.d_model, spec.depth.n_layers
    objective_ = objective(spec)
    rows = _rows(spec, objective_)  # T5's sentinels are ids past the data's vocabulary
    embed, head = embedding_and_head(spec, rows)
    encoder = make_rnn(cell, d, d, spec.depth.n_enc_layers or n_dec, dropout=spec.dropout,
                       bidirectional=o["bidirectional"])
    d_context = d * (2 if o["bidirectional"] else 1)
    score = None if o["alignment"] == "none" else ALIGNMENTS.make(o["alignment"], d_query=d, d_key=d_context)
    if o["attend"] == "bahdanau":
        rnn = make_rnn(cell, d + d_context, d, n_dec, dropout=spec.dropout)
        decoder = BahdanauDecoder(rnn, score, d, d_context, d_final=d)
    else:
        feeding = o["input_feeding"] and score is not None
        rnn = make_rnn(cell, d + (d if feeding else 0), d, n_dec, dropout=spec.dropout)
        decoder = LuongDecoder(rnn, score, d, d_context, feeding)
    return RNNEncoderDecoder(embed, encoder, decoder, head, objective_, spec.dropout)


def _any_encoder_decoder(spec: Spec) -> nn.Module:
    recurrent = DEPTHS.entry(spec.depth.name).info.get("recurrent", False)
    return (_rnn_encoder_decoder if recurrent else _encoder_decoder)(spec)


MODELS.register("decoder", _language_model, needs=("spec",))
MODELS.register("encoder", _language_model, needs=("spec",))
MODELS.register("classifier", _classifier, needs=("spec",))
MODELS.register("dual_encoder", _dual_encoder, needs=("spec",))
MODELS.register("encoder_decoder", _any_encoder_decoder, needs=("spec",))


def build(spec: Spec | str) -> nn.Module:
    """Turn a spec (or a member name) into a module, which carries it as ``model.spec``.

    The spec rides along for whoever holds the model (export, checkpoints, a reader); no part reads
    it, so the rule that specs never enter modules holds for what a module computes."""
    if isinstance(spec, str):
        if spec not in MEMBERS:
            raise ValueError(f"unknown member {spec!r}; valid members: {', '.join(MEMBERS.names())}")
        spec = MEMBERS[spec]()
    if not isinstance(spec, Spec):
        raise TypeError(f"build() takes a Spec or a member name, got {type(spec).__name__}")
    check_fits(spec)  # refuse a model larger than the machine before allocating any of it
    model = MODELS.make(spec.model, spec=spec)
    model.spec = spec
    return model
