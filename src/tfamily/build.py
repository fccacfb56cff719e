"""The only place where specs become modules: every string and flag in a spec is
resolved here into a part, and members differ only in which parts they get.

Parts are constructed through their axis registry (``tfamily/registry.py``), which
supplies each constructor the sizes it ``needs``; every axis registers in its own folder
except the model kinds: assembling a model is reading a spec, so they register here.
"""
from __future__ import annotations

from torch import nn

from .spec import part_checks  # noqa: F401  (registers the spec checks that need parts)
from .models import (Classifier, ClassHead, DualEncoder, EncoderDecoder, FirstToken, LanguageModel, LastToken,
                     MeanPool, MLMHead, PairHead)
from .models.rnn_decoders import BahdanauDecoder, LuongDecoder
from .models.rnn_encdec import RNNEncoderDecoder
from .nn.attention import Attention
from .nn.block import Block
from .nn.depth import RNN_OPTIONS, make_rnn  # noqa: F401  (RNN_OPTIONS: build.RNN_OPTIONS, as before)
from .nn.embedding import LMHead, NoTokenTypes, TokenEmbedding, TokenTypes
from .nn.feedforward import Chunked
from .nn.heads import QKVProjection
from .nn.heads.global_qkv import GlobalTokenAttention
from .nn.init import InitScheme, init_linears
from .nn.patterns import Full, Pattern, SoftPattern, SoftPatternKernel
from .nn.patterns import resolve as resolve_pattern
from .nn.position import NoPosition
from .objectives import Classification, ReservesIds
from .registry import (ALIGNMENTS, DEPTHS, FEEDFORWARDS, HEADS, INITS, KERNELS, MEMBERS, MODELS, NORMS,
                       OBJECTIVES, PATTERNS, POSITIONS, RESIDUALS, STATES)
from .spec.sizes import check_fits
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


def stack(spec: Spec, n_layers: int, *, pattern_: Pattern | None = None, cross: bool = False) -> nn.Module:
    final = RESIDUALS.entry(spec.residual.name).info["final_norm"]
    # A position part marked shared is built once per stack (T5: layer 0's bias serves every layer),
    # causal when the stack's first layer is.
    shared = None
    if POSITIONS.entry(spec.position.name).info.get("shared"):
        shared = position(spec, (pattern_ if pattern_ is not None else pattern(spec, 0)).causal)
    # Each depth kind takes the needs it declares (nn/depth/): a recurrent stack no blocks.
    return DEPTHS.make(spec.depth.name, spec.depth.params,
                       blocks=lambda i: block(spec, i, pattern_=pattern_, cross=cross, position_=shared),
                       n_layers=n_layers, final_norm=norm(spec) if final else None,
                       checkpointing=spec.depth.checkpointing, d_model=spec.d_model, dropout=spec.dropout)


def input_position(spec: Spec) -> nn.Module:
    pos = spec.position
    if POSITIONS.entry(pos.name).info["stage"] != "input":
        return NoPosition()
    position = POSITIONS.make(pos.name, pos.params, d_model=spec.d_model, max_len=pos.max_len)
    table = getattr(position, "table", None)
    if isinstance(table, nn.Embedding):
        init_scheme(spec).table(table.weight)
    return position


def state(spec: Spec, layers: nn.Module):
    """The model's ``new_state`` for ``layers`` (nn/state/, nn/depth/recurrent.py; None: a KV cache per layer)."""
    return STATES.make(spec.state.name, spec.state.params, layers=layers, mem_len=spec.state.mem_len)


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
    return LanguageModel(embed, input_position(spec), layers, head, objective_, spec.dropout_at("embed"),
                         make_state=state(spec, layers), embed_norm=norm(spec) if spec.norm.embed else None,
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
