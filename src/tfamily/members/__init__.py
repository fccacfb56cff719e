"""The family: each member is a named preset over the design axes.

``tfamily.members.<name>(**overrides)`` returns a ``Spec``; overrides are top-level
fields (``d_model=128``), partial axis dicts (``heads=dict(n_kv_heads=2)``) or
``axis__field`` keys (``heads__n_kv_heads=2``). An override that names another choice on an
axis drops the old choice's ``params`` and ``per_layer`` (``spec.renamed``).

Every Transformer member is its model kind's base recipe (``members/recipes.py``: GPT-2's for decoders,
BERT's for encoders, the Transformer's for encoder-decoders), at its paper's sizes, plus only
what its paper changes: each ``Change`` names the spec key, the value and its source (the section
and the paper's words). Changes marked ``attention`` are the attention mechanism (pattern, kernel,
shared-QK heads, a reversible depth); the member's dense twin (``Member.dense``) sets those back
to the base's and keeps every other change. ``tfamily members A --diff B`` and the tour read this
registration; nothing else lists a member's differences.

A sparse member's sizes are its paper's, chosen for that paper's context. ``at_context(spec, seq_len)``
is the member's one rule for a shorter context (its docstring says which): the overrides that keep
the pattern sparse there. The trainer applies it once ``data.seq_len`` is known
(``train/resolve.py``); a value the user sets wins. The rules live in ``members/contexts.py``. A member's
own ``pattern.per_layer`` list follows the depth (``family.follow_depth``).
"""
from __future__ import annotations

from .contexts import blocks_at, buckets_at, fixed_at, query_blocks_at, stride_at, windows_at
from .family import (REGISTRY, Member, compose, describe, diff, diff_specs, get, member, own_depth,  # noqa: F401
                     recurrent)
from .recipes import Change, attention

_SDPA_NOTE = "not a paper choice: tfamily's block-sparse kernel, whose cost follows the pattern's density"


@member("vanilla", "Vaswani et al. 2017, Attention Is All You Need", "encoder_decoder")
def vanilla() -> None:
    """The encoder-decoder base itself (``recipes.ENCODER_DECODER``): post-norm, sinusoidal positions,
    ReLU feed-forward, embeddings x sqrt(d_model) shared with the pre-softmax projection, dropout 0.1
    on sublayer outputs and embedding sums; the base model's sizes."""


@member("gpt", "Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2)", "decoder")
def gpt() -> None:
    """The decoder base itself (``recipes.DECODER``), GPT-2 small's shape, with GPT-2's recipe as
    Hugging Face's GPT2LMHeadModel implements it: token and position tables N(0, 0.02) added
    unscaled, every weight N(0, 0.02) and biases zero, the residual output projections
    N(0, 0.02 / sqrt(2 L)); dropout 0.1 on the embedding sum, the attention probabilities and the
    sublayer outputs, none on the MLP's hidden activations; tanh GELU; a tied head without a scale."""


@member("bert", "Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers", "encoder")
def bert() -> None:
    """The encoder base itself (``recipes.ENCODER``), BERT-base's shape: post-norm, learned
    positions, a LayerNorm on the embedding sum, erf GELU, N(0, 0.02) without residual scaling,
    dropout 0.1 on embeddings, attention probabilities and sublayer outputs, a tied masked-LM head."""


_LLAMA, _LLAMA3 = "Touvron et al. 2023 (LLaMA), section 2.2", "Grattafiori et al. 2024 (Llama 3), section 3.1.1"


@member("llama", "Grattafiori et al. 2024, The Llama 3 Herd of Models (Llama 3 8B)", "decoder",
        sizes=dict(d_model=4096, heads={"n_heads": 32}, depth={"n_layers": 32}),
        changes=(
            Change("position", {"name": "rotary", "max_len": 8192, "params": {"base": 500000.0}},
                   f"{_LLAMA}: \"We remove the absolute positional embeddings, and instead, add rotary positional "
                   f"embeddings (RoPE)\"; {_LLAMA3}: \"We increase the RoPE base frequency hyperparameter to "
                   f"500,000\""),
            Change("norm", {"name": "rms_norm", "params": {"eps": 1e-5}},
                   f"{_LLAMA}: \"We use the RMSNorm normalizing function\""),
            Change("ff", {"name": "glu", "activation": "silu", "d_ff": 14336},
                   f"{_LLAMA}: \"We replace the ReLU non-linearity by the SwiGLU activation function\"; d_ff 14,336 "
                   f"is Llama 3 8B's (table 3)"),
            Change("heads.n_kv_heads", 8, f"{_LLAMA3}: \"grouped query attention (GQA) with 8 key-value heads\""),
            Change("bias", False, "not in the papers (silent): the released models have no biases"),
            Change("tie_embeddings", False, "not in the papers (silent): the released 8B model has its own output matrix"),
            Change("dropout", 0.0, "not in the papers (silent): the released code has no dropout"),
        ))
def llama() -> None:
    """Decoder-only LM, Llama 3 8B's shape: rotary positions (base 500000), pre-norm RMSNorm, a
    SwiGLU feed-forward (``glu`` with SiLU, Shazeer 2020), grouped-query heads (8 key/value heads
    for 32 query heads, Ainslie et al. 2023), no biases, an untied head, no dropout."""


# -- sparse attention members: patterns in nn/patterns, block-sparse kernels in nn/kernels ------
# The Sparse Transformer is two members, one per factorized pattern; the three ways to
# combine its parts are pattern choices: params combine="heads" | "merged", or
# pattern.per_layer = [A1, A2] to interleave by layer (see nn/patterns/factorized.py).

_CHILD = "Child et al. 2019"
_BLOCKSPARSE = attention("kernel", {"name": "blocksparse"}, _SDPA_NOTE)
_CHILD_RECIPE = (
    Change("ff.activation", "gelu_sigmoid", f"{_CHILD}, section 5.2: \"Our choice of f is the Gaussian Error Linear "
                                            f"Unit (Hendrycks & Gimpel, 2016), f(X) = X * sigmoid(1.702 * X)\""),
    Change("attn_dropout", 0.0, f"{_CHILD}, section 5.4: \"we do not apply dropout within the attention blocks, as in "
                                f"(Vaswani et al., 2017), and instead only apply it at the end of each residual "
                                f"addition\""),
    Change("embed_dropout", 0.0, f"{_CHILD}, section 5.4: dropout \"only ... at the end of each residual addition\""),
    Change("tie_embeddings", False, f"{_CHILD}, section 5.2, eq. 11: y = softmax(norm(H_N) W_out), an output matrix "
                                    f"of its own"),
)


def _sizes(d_model: int, n_heads: int, n_layers: int, max_len: int, **more) -> dict:
    return dict(d_model=d_model, heads={"n_heads": n_heads}, depth={"n_layers": n_layers},
                position={"max_len": max_len}, **more)


@member("sparse_transformer_strided",
        "Child et al. 2019, Generating Long Sequences with Sparse Transformers (strided)", "decoder",
        sizes=_sizes(512, 8, 12, 16384), at_context=stride_at,
        changes=(attention("pattern", {"name": "strided", "params": {"stride": 128, "combine": "heads"}},
                           f"{_CHILD}, section 4.2, eq. 5: A(1) = {{t, t+1, ..., i}} for t = max(0, i - l) and "
                           f"A(2) = {{j : (i - j) mod l = 0}}, one per head"), _BLOCKSPARSE, *_CHILD_RECIPE,
                 Change("dropout", 0.01, f"{_CHILD}, section 7.3 (the strided model, stride 128): \"a dropout of "
                                         f"0.01\"")))
def sparse_transformer_strided() -> None:
    """Strided factorized attention, A1 and A2 on alternating heads (eq. 5); the paper's
    image setting (stride = image width). Section 5.2's pre-activation residual blocks and 1/sqrt(2N)
    output initialisation are the decoder base's; its GELU is the sigmoid form, dropout acts only on
    the residual branches, and the output matrix is its own. At a shorter
    context the stride is round(sqrt(seq_len)) (section 4.1: l close to sqrt(n)), so at 64 it is 8."""


@member("sparse_transformer_fixed",
        "Child et al. 2019, Generating Long Sequences with Sparse Transformers (fixed)", "decoder",
        sizes=_sizes(512, 8, 30, 12288), at_context=fixed_at,
        changes=(attention("pattern", {"name": "fixed", "params": {"block": 128, "summary": 32, "combine": "merged"}},
                           f"{_CHILD}, section 4.2, eq. 6, and section 7.2: \"We used a stride of 128, c = 32, and "
                           f"merged the factorized attention heads\""),
                 _BLOCKSPARSE, *_CHILD_RECIPE,
                 Change("dropout", 0.4, f"{_CHILD}, section 7.2: \"We used 30-layer fixed Sparse Transformers with 8 "
                                        f"heads, d = 512, and a dropout rate of 0.40\"")))
def sparse_transformer_fixed() -> None:
    """Fixed factorized attention (l = 128, c = 32, section 7.2's enwik8 setting), A1 and A2
    merged into one pattern per head as there; 30 layers of d 512 as in the paper's enwik8 model. At a shorter
    context l is the power of two nearest sqrt(seq_len) and c = l / 4 (l = 8, c = 2 at 64)."""


_LONGFORMER_WINDOWS = [32 * 2 ** (4 * i // 11) for i in range(12)]


@member("longformer", "Beltagy et al. 2020, Longformer: The Long-Document Transformer", "decoder",
        sizes=_sizes(512, 8, 12, 23040), at_context=windows_at,
        changes=(attention("pattern", {"name": "longformer", "params": {"window": 256, "n_global": 1},
                                       "per_layer": [{"name": "longformer", "params": {"window": w, "n_global": 1}}
                                                     for w in _LONGFORMER_WINDOWS]},
                           "Beltagy et al. 2020, section 4.1: \"we use small window sizes for the lower layers and "
                           "increase window sizes as we move to higher layers\" (32 to 512, table 4); one global "
                           "token shows section 3.1's global attention (the character LM has none: n_global=0)"),
                 _BLOCKSPARSE,
                 Change("position", {"name": "relative"}, "Beltagy et al. 2020, appendix B: \"We use relative "
                                                          "position embeddings with sinusoidal weights as in Dai et "
                                                          "al. (2019)\"")))
def longformer() -> None:
    """Autoregressive character LM of section 4: sliding windows growing with depth (from
    32 in the first layer to 512 in the last) plus one global token; 12 layers, d 512. At a
    context under 1024 all windows halve together until the largest is at most half of it
    (section 4.2 grows the window with the sequence length): 2 to 32 at 64. At another depth the
    window list is resampled from first to last layer, so the last layer keeps the largest."""


@member("bigbird", "Zaheer et al. 2020, Big Bird: Transformers for Longer Sequences", "decoder",
        sizes=_sizes(768, 12, 12, 4096), at_context=blocks_at,
        changes=(attention("pattern", {"name": "bigbird", "params": {"block": 64, "n_random": 3}},
                           "Zaheer et al. 2020, section 2: each query attends to r random keys, w/2 tokens on each "
                           "side of it and g global tokens (blocks of 64: 3-block window, 2 global, 3 random)"),
                 _BLOCKSPARSE))
def bigbird() -> None:
    """Global + sliding window + random blocks (blocks of 64: 3-block window, 2 global
    blocks, 3 random blocks per head and layer), as a causal decoder; BERT-base shape. At a
    context under 16 blocks the block halves until there are 16 (blocks of 4 at 64), so the 8
    blocks a query sees stay at most half of them."""


_PARMAR = "Parmar et al. 2018"
_PIXELS = (Change("vocab_size", 256, f"{_PARMAR}, section 3.1: each channel's intensity is one of 256 categories"),
           Change("tie_embeddings", False, f"{_PARMAR}, section 3.1: the output intensities have one separate set of "
                                           f"256 embeddings, shared across channels"),
           Change("residual", {"name": "post_norm"}, f"{_PARMAR}, section 3.2: \"Self-attention and the feed-forward "
                                                     f"networks are followed by dropout and bypassed by a residual\" "
                                                     f"connection, then layer norm (tensor2tensor's \"dan\")"))


@member("image_transformer_1d", "Parmar et al. 2018, Image Transformer (local 1D)", "decoder",
        sizes=_sizes(512, 8, 12, 3072), at_context=query_blocks_at(("block",), ("memory",)),
        changes=(*_PIXELS,
                 attention("pattern", {"name": "local_1d", "params": {"block": 256, "memory": 256}},
                           f"{_PARMAR}, section 3.2: the sequence is split into query blocks and each attends to "
                           f"its block and a memory of the previous positions (l_q = l_m = 256)"), _BLOCKSPARSE))
def image_transformer_1d() -> None:
    """Pixel decoder with 1D local attention: query blocks of 256, 256 positions of memory
    (section 3.2); sequences are images in raster order, vocabulary = 256 intensities. At a
    context under 4 query blocks, block and memory halve together until it holds 4 (16 at 64)."""


@member("image_transformer_2d", "Parmar et al. 2018, Image Transformer (local 2D)", "decoder",
        sizes=_sizes(512, 8, 12, 3072),
        at_context=query_blocks_at(("block_h", "block_w"), ("memory_h", "memory_w")),
        changes=(*_PIXELS,
                 attention("pattern", {"name": "local_2d", "params": {"width": 96, "block_h": 8, "block_w": 32,
                                                                      "memory_h": 8, "memory_w": 16}},
                           f"{_PARMAR}, section 3.2 and section 4: 2D query blocks of 8 x 32 with a memory flange "
                           f"of 8 rows above and 16 columns each side"), _BLOCKSPARSE))
def image_transformer_2d() -> None:
    """Pixel decoder with 2D local attention over 32 x 96 images (CIFAR, channels side by
    side): query blocks of 8 x 32 with a flange of 8 rows above and 16 columns each side
    (section 4), sequence in block-raster order (``patterns.to_block_raster``). At a context
    under 4 query blocks, the block and its flange halve together until it holds 4 (2 x 8
    with flanges 2 and 4 at 64)."""


_KITAEV = "Kitaev et al. 2020"


@member("reformer", "Kitaev et al. 2020, Reformer: The Efficient Transformer", "decoder",
        sizes=dict(d_model=512, heads={"n_heads": 8}, depth={"n_layers": 6}, ff={"d_ff": 2048}), at_context=buckets_at,
        changes=(
            attention("kernel", {"name": "lsh", "params": {"n_hashes": 4, "bucket_size": 64}},
                      f"{_KITAEV}, section 2: locality-sensitive hashing attention, n_rounds = 4, buckets of 64"),
            attention("heads.shared_qk", True, f"{_KITAEV}, section 2: \"we use a shared-QK Transformer\""),
            attention("depth.name", "reversible", f"{_KITAEV}, section 3: reversible residual layers "
                                                  f"(Gomez et al. 2017), y1 = x1 + Attention(x2), y2 = x2 + FeedForward(y1)"),
            Change("ff.chunks", 4, f"{_KITAEV}, section 3: the feed-forward computed in chunks along the sequence "
                                   f"(the same function, less memory)"),
            Change("position", {"name": "sinusoidal"},
                   f"not the paper's: {_KITAEV} use axial position embeddings; tfamily uses sinusoids so any "
                   f"length runs"),
        ))
def reformer() -> None:
    """Causal LM: shared-QK LSH attention (4 rounds, buckets of 64), reversible pre-norm
    layers and a feed-forward chunked in 4 along the sequence; sinusoidal positions so
    any length runs (the paper's axial embeddings are a position choice, not used here). At a
    context under 8 buckets the bucket (and chunk) halves until there are 8 (8 at 64)."""


# -- recurrence and learned spans: state axis nn/state/memory.py, nn/position/relative.py,
# nn/patterns/adaptive_span.py. A carried state makes `tfamily train` and `eval` stream contiguous segments
# (data.StreamBatches) by default; data.stream=false trains on random windows, with a note at start.

_DAI = "Dai et al. 2019"
# Where the paper is silent (activation, embedding scale, init, the attention dropout), the decoder base
# holds, though the released code differs (experiments/members/paper_setups.md lists those).
_XL = (
    Change("position", {"name": "relative"}, f"{_DAI}, section 3.3: \"replace all appearances of the absolute "
                                             f"positional embedding U_j for computing key vectors in term (b) and (d) "
                                             f"with its relative counterpart R_{{i-j}}\", with trainable u and v"),
    Change("state", {"name": "xl_memory", "mem_len": 512},
           f"{_DAI}, section 3.2: \"the hidden state sequence computed for the previous segment is fixed and cached "
           f"to be reused as an extended context\""),
    Change("residual", {"name": "post_norm"}, f"{_DAI}, section 3.3: o = LayerNorm(Linear(a) + h), the sum normalised"),
)
_XL_SIZES = dict(vocab_size=256, d_model=512, heads={"n_heads": 8}, depth={"n_layers": 12}, ff={"d_ff": 2048})


@member("transformer_xl", "Dai et al. 2019, Transformer-XL: Attentive Language Models Beyond a "
                          "Fixed-Length Context", "decoder", sizes=_XL_SIZES, changes=_XL)
def transformer_xl() -> None:
    """Segment-level recurrence (detached memory of mem_len layer inputs) with relative
    positions (u, v, W_R^k); the enwik8 base model: 12 post-norm layers, d 512, 8 heads,
    ReLU d_ff 2048, segments and memory of 512."""


_SUKHBAATAR = "Sukhbaatar et al. 2019"


@member("adaptive_span", "Sukhbaatar et al. 2019, Adaptive Attention Span in Transformers", "decoder",
        sizes=_XL_SIZES,
        changes=(*_XL,
                 attention("pattern", {"name": "adaptive_span", "params": {"max_span": 8192, "ramp": 32, "l1": 5e-7}},
                           f"{_SUKHBAATAR}, section 2.2: a soft mask m_z(x) = min(max((R + z - x) / R, 0), 1) with "
                           f"a learned span z per head; section 3: S = 8192, R = 32, \"λ is reduced to 0.5×10^-6 "
                           f"when S=8192\""),
                 Change("state.mem_len", 8192, f"{_SUKHBAATAR}, section 2.1: \"the caching mechanism of Dai et al. "
                                               f"(2019)\", as long as the largest span"),
                 Change("ff.activation", "relu", f"{_SUKHBAATAR}, section 3: \"the feedforward ReLU layers\""),
                 Change("dropout", 0.0, f"{_SUKHBAATAR}, section 3: \"we apply dropout with a rate of 0.3 to the "
                                        f"attention and the feedforward ReLU activations\" (and nowhere else)"),
                 Change("embed_dropout", 0.0, f"{_SUKHBAATAR}, section 3: dropout on the attention and the ReLU only"),
                 Change("attn_dropout", 0.3, f"{_SUKHBAATAR}, section 3: small models, rate 0.3 on the attention"),
                 Change("ff_dropout", 0.3, f"{_SUKHBAATAR}, section 3: small models, rate 0.3 on the ReLU activations")))
def adaptive_span() -> None:
    """A learned span per head (S = 8192, ramp R = 32, L1 0.5e-6) over a memory as long as the
    largest span; the paper's small enwik8 model (12 layers, d 512, ReLU, dropout 0.3 on the attention
    and the ReLU activations only). Its positions are Transformer-XL's relative encoding, not the
    paper's learned relative key embeddings (Shaw et al. 2018), which tfamily does not implement."""


# -- memory for reinforcement learning (Parisotto et al. 2019): identity-map reordering and gates as
# residual choices (nn/residual/: IdentityMap and the gates); the rest is Transformer-XL's.

_PARISOTTO = "Parisotto et al. 2019, Stabilizing Transformers for Reinforcement Learning"
# Section 4 / appendix: 12 layers, embedding 256, 8 heads of dimension 64, memory 512;
# the feed-forward width (4 x d_model) and dropout 0 are our choices.
_RL_SIZES = dict(_XL_SIZES, d_model=256, heads={"n_heads": 8, "d_head": 64}, ff={"d_ff": 1024})
_RL_DROPOUT = Change("dropout", 0.0, "not the paper's (silent on dropout): tfamily's choice for reinforcement "
                                    "learning, where the policy that acts should be the one that learns")


@member("gtrxl", f"{_PARISOTTO} (GTrXL)", "decoder", sizes=_RL_SIZES,
        changes=(*_XL, _RL_DROPOUT, Change("residual", {"name": "gru_gate"},
                                           "Parisotto et al. 2019, section 3.2: a GRU-type gating layer in place of "
                                           "each residual connection, on the identity-map reordered block")))
def gtrxl() -> None:
    """Gated Transformer-XL: XL memory and relative positions, LayerNorm on each sublayer's
    input only (memory included) and a GRU-type gate in place of each residual sum
    (section 3.2), b_g = 2 so every layer starts near the identity map (z ~= 0.12).
    residual__params={"gate_bias": 0.0} is the paper's ablation; residual__name picks the
    other gates (input_gate, output_gate, highway_gate, sigmoid_tanh_gate), each with its
    own default b_g."""


@member("trxl_i", f"{_PARISOTTO} (TrXL-I)", "decoder", sizes=_RL_SIZES,
        changes=(*_XL, _RL_DROPOUT, Change("residual", {"name": "identity_map"},
                                           "Parisotto et al. 2019, section 3.1: the identity map reordering, layer "
                                           "normalization on the input stream of each submodule")))
def trxl_i() -> None:
    """Transformer-XL with the identity-map reordering (section 3.1): x + ReLU(Sublayer(LN(x))),
    memory normalised with the stream; no gate. Same shape as gtrxl."""


# -- recurrence in depth: nn/depth/universal.py (shared block, t2t halting),
# nn/position/coordinate.py (position + step, eq. 6-7). ACT on or off is the depth name.

_DEHGHANI = "Dehghani et al. 2019"
_UT_POSITION = Change("position", {"name": "none"}, f"{_DEHGHANI}, section 2.1, eq. 6-7: the coordinate embedding "
                                                    f"(position and time step) is added before every step")


@member("universal_transformer", "Dehghani et al. 2019, Universal Transformers", "encoder_decoder",
        changes=(Change("depth.name", "universal", f"{_DEHGHANI}, section 2.1: the same transition function is "
                                                   f"applied recurrently, T steps with shared weights"),
                 _UT_POSITION))
def universal_transformer() -> None:
    """Encoder-decoder whose encoder and decoder each apply one post-norm block (section 2.1:
    LayerNorm after attention and after the transition) recurrently for T = depth.n_layers = 6
    steps, adding the coordinate signal (position + step) before every step instead of input
    positions; feed-forward ReLU transition; the base shape of the vanilla model. ACT is off;
    depth__name="universal_act" turns on per-position halting (t2t semantics, max_steps =
    n_layers, ponder weight 0.01), one ponder loss per side."""


@member("universal_transformer_lm", "Dehghani et al. 2019, Universal Transformers", "decoder",
        sizes=dict(vocab_size=256, d_model=512, heads={"n_heads": 8}, depth={"n_layers": 8}, ff={"d_ff": 2048}),
        changes=(Change("depth.name", "universal_act", f"{_DEHGHANI}, section 2.2: dynamic halting with ACT per "
                                                       f"position, at most 8 steps"),
                 _UT_POSITION,
                 Change("residual", {"name": "post_norm"}, f"{_DEHGHANI}, section 2.1, eq. 4-5: "
                                                           f"H^t = LayerNorm(A^t + Transition(A^t))"),
                 Change("ff.activation", "relu", f"{_DEHGHANI}, section 2.1: \"a single rectified-linear "
                                                 f"activation function between two affine transformations\"")))
def universal_transformer_lm() -> None:
    """Decoder-only UT with per-position dynamic halting on (depth 'universal_act': at most
    8 steps, eps 0.01, ponder weight 0.01, halting bias 1): the shape of the paper's LM runs
    is not ours; d 512, 8 heads, ReLU d_ff 2048, bytes. depth__name="universal" turns ACT off
    (a fixed 8 steps)."""


# The recurrent baselines (RNN-era LMs and attention encoder-decoders) have no Transformer base: members/rnn.py.
from . import rnn as members_rnn  # noqa: E402,F401  (registers them after the Transformer members)


def __getattr__(name: str):
    if name in REGISTRY:
        return REGISTRY[name].make
    raise AttributeError(f"tfamily.members has no member {name!r}; valid: {', '.join(sorted(REGISTRY))}")
