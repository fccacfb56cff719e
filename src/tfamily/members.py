"""The family: each member is a named preset over the design axes.

``tfamily.members.<name>(**overrides)`` returns a ``Spec``; overrides are top-level
fields (``d_model=128``), partial axis dicts (``heads=dict(n_kv_heads=2)``) or
``axis__field`` keys (``heads__n_kv_heads=2``).

A sparse member's sizes are its paper's, chosen for that paper's context. ``at_context(spec, seq_len)``
is the member's one rule for a shorter context (its docstring says which): the overrides that keep
the pattern sparse there. The trainer applies it once ``data.seq_len`` is known
(``train/resolve.py``); a value the user sets wins. The rules live in ``contexts.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .contexts import blocks_at, buckets_at, fixed_at, query_blocks_at, stride_at, windows_at
from .registry import MEMBERS
from .spec import Spec


@dataclass(frozen=True)
class Member:
    name: str
    paper: str
    make: Callable[..., Spec]
    at_context: Callable[[dict, int], dict] | None = None  # (preset dict, seq_len) -> overrides


REGISTRY: dict[str, Member] = {}


def member(name: str, paper: str, at_context: Callable[[dict, int], dict] | None = None):
    def register(fn: Callable[[], dict]) -> Callable[..., Spec]:
        def make(**overrides) -> Spec:
            spec = Spec.from_dict({"member": name, "paper": paper, **fn()})
            return spec.replace(**overrides) if overrides else spec
        make.__name__, make.__doc__ = name, f"{paper}\n\n{fn.__doc__ or ''}"
        REGISTRY[name] = Member(name, paper, make, at_context)
        MEMBERS.register(name, make, paper=paper)
        return make
    return register


def get(name: str) -> Callable[..., Spec]:
    if name not in REGISTRY:
        raise ValueError(f"unknown member {name!r}; valid members: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name].make


def describe() -> list[dict]:
    return [{"name": m.name, "paper": m.paper, "model": (s := m.make()).model, "choices": s.choices()}
            for m in REGISTRY.values()]


@member("vanilla", "Vaswani et al. 2017, Attention Is All You Need")
def vanilla() -> dict:
    """The base encoder-decoder: post-norm, sinusoidal positions, ReLU feed-forward."""
    return dict(model="encoder_decoder", d_model=512, dropout=0.1,
                pattern={"name": "causal"}, position={"name": "sinusoidal"},
                heads={"n_heads": 8}, residual={"name": "post_norm"},
                depth={"n_layers": 6}, ff={"d_ff": 2048, "activation": "relu"},
                objective={"name": "seq2seq"})


@member("gpt", "Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2)")
def gpt() -> dict:
    """Decoder-only LM: pre-norm, learned positions, tanh-GELU (GPT-2 small shape), with GPT-2's
    recipe as Hugging Face's GPT2LMHeadModel implements it: token and position tables N(0, 0.02)
    added unscaled, every weight N(0, 0.02) and biases zero, the residual output projections
    N(0, 0.02 / sqrt(2 L)); dropout 0.1 on the embedding sum, the attention probabilities and
    the sublayer outputs, none on the MLP's hidden activations; a tied head without a scale."""
    return dict(model="decoder", d_model=768, dropout=0.1, embed_dropout=None, attn_dropout=None,
                ff_dropout=0.0, scale_embeddings=False, logit_scale=False, bias=True,
                init={"name": "normal", "params": {"std": 0.02, "scale_residual": True}},
                pattern={"name": "causal"}, position={"name": "learned", "max_len": 1024},
                heads={"n_heads": 12}, residual={"name": "pre_norm"},
                depth={"n_layers": 12}, ff={"activation": "gelu_tanh"}, objective={"name": "causal_lm"})


@member("bert", "Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers")
def bert() -> dict:
    """Encoder with a masked-LM head: post-norm, learned positions, GELU (BERT-base shape)."""
    return dict(model="encoder", d_model=768, dropout=0.1,
                pattern={"name": "full"}, position={"name": "learned", "max_len": 512},
                heads={"n_heads": 12}, residual={"name": "post_norm"},
                depth={"n_layers": 12}, ff={"activation": "gelu"}, objective={"name": "masked_lm"})


@member("llama", "Grattafiori et al. 2024, The Llama 3 Herd of Models (Llama 3 8B)")
def llama() -> dict:
    """Decoder-only LM, Llama 3 8B's shape: rotary positions (base 500000), pre-norm RMSNorm, a
    SwiGLU feed-forward (``glu`` with SiLU, Shazeer 2020), grouped-query heads (8 key/value heads
    for 32 query heads, Ainslie et al. 2023), no biases, an untied head, no dropout."""
    return dict(model="decoder", d_model=4096, dropout=0.0, scale_embeddings=False, logit_scale=False, bias=False,
                tie_embeddings=False, pattern={"name": "causal"},
                position={"name": "rotary", "max_len": 8192, "params": {"base": 500000.0}},
                heads={"n_heads": 32, "n_kv_heads": 8}, residual={"name": "pre_norm"},
                norm={"name": "rms_norm", "params": {"eps": 1e-5}}, depth={"n_layers": 32},
                ff={"name": "glu", "activation": "silu", "d_ff": 14336}, objective={"name": "causal_lm"})

# -- sparse attention members: patterns in nn/patterns, block-sparse kernels in nn/kernels ------
# The Sparse Transformer is two members, one per factorized pattern; the three ways to
# combine its parts are pattern choices: params combine="heads" | "merged", or
# pattern.per_layer = [A1, A2] to interleave by layer (see nn/patterns/factorized.py).

def _sparse_decoder(pattern: dict, d_model: int, n_heads: int, n_layers: int, max_len: int) -> dict:
    return dict(model="decoder", d_model=d_model, dropout=0.1, pattern=pattern,
                kernel={"name": "blocksparse"}, position={"name": "learned", "max_len": max_len},
                heads={"n_heads": n_heads}, residual={"name": "pre_norm"}, depth={"n_layers": n_layers},
                ff={"activation": "gelu"}, objective={"name": "causal_lm"})


@member("sparse_transformer_strided",
        "Child et al. 2019, Generating Long Sequences with Sparse Transformers (strided)", stride_at)
def sparse_transformer_strided() -> dict:
    """Strided factorized attention, A1 and A2 on alternating heads (eq. 5); the paper's
    image setting (stride = image width). Pre-norm, GELU, learned positions. At a shorter
    context the stride is round(sqrt(seq_len)) (section 4.1: l close to sqrt(n)), so at 64 it is 8."""
    return _sparse_decoder({"name": "strided", "params": {"stride": 128, "combine": "heads"}},
                           512, 8, 12, 16384)


@member("sparse_transformer_fixed",
        "Child et al. 2019, Generating Long Sequences with Sparse Transformers (fixed)", fixed_at)
def sparse_transformer_fixed() -> dict:
    """Fixed factorized attention (l = 128, c = 32, section 7.3's enwik8 setting), A1 and A2
    on alternating heads; 30 layers of d 512 as in the paper's enwik8 model. At a shorter
    context l is the power of two nearest sqrt(seq_len) and c = l / 4 (l = 8, c = 2 at 64)."""
    return _sparse_decoder({"name": "fixed", "params": {"block": 128, "summary": 32, "combine": "heads"}},
                           512, 8, 30, 12288)


@member("longformer", "Beltagy et al. 2020, Longformer: The Long-Document Transformer", windows_at)
def longformer() -> dict:
    """Autoregressive character LM of section 4: sliding windows growing with depth (from
    32 in the first layer to 512 in the last) plus one global token; 12 layers, d 512. At a
    context under 1024 all windows halve together until the largest is at most half of it
    (section 4.2 grows the window with the sequence length): 2 to 32 at 64."""
    windows = [32 * 2 ** (4 * i // 11) for i in range(12)]
    per_layer = [{"name": "longformer", "params": {"window": w, "n_global": 1}} for w in windows]
    spec = _sparse_decoder({"name": "longformer", "params": {"window": 256, "n_global": 1}},
                           512, 8, 12, 23040)
    spec["pattern"]["per_layer"] = per_layer
    return spec


@member("bigbird", "Zaheer et al. 2020, Big Bird: Transformers for Longer Sequences", blocks_at)
def bigbird() -> dict:
    """Global + sliding window + random blocks (blocks of 64: 3-block window, 2 global
    blocks, 3 random blocks per head and layer), as a causal decoder; BERT-base shape. At a
    context under 16 blocks the block halves until there are 16 (blocks of 4 at 64), so the 8
    blocks a query sees stay at most half of them."""
    return _sparse_decoder({"name": "bigbird", "params": {"block": 64, "n_random": 3}},
                           768, 12, 12, 4096)


@member("image_transformer_1d", "Parmar et al. 2018, Image Transformer (local 1D)",
        query_blocks_at(("block",), ("memory",)))
def image_transformer_1d() -> dict:
    """Pixel decoder with 1D local attention: query blocks of 256, 256 positions of memory
    (section 3.2); sequences are images in raster order, vocabulary = 256 intensities. At a
    context under 4 query blocks, block and memory halve together until it holds 4 (16 at 64)."""
    return dict(_sparse_decoder({"name": "local_1d", "params": {"block": 256, "memory": 256}},
                                512, 8, 12, 3072), vocab_size=256, tie_embeddings=False)


@member("image_transformer_2d", "Parmar et al. 2018, Image Transformer (local 2D)",
        query_blocks_at(("block_h", "block_w"), ("memory_h", "memory_w")))
def image_transformer_2d() -> dict:
    """Pixel decoder with 2D local attention over 32 x 96 images (CIFAR, channels side by
    side): query blocks of 8 x 32 with a flange of 8 rows above and 16 columns each side
    (section 4), sequence in block-raster order (``patterns.to_block_raster``). At a context
    under 4 query blocks, the block and its flange halve together until it holds 4 (2 x 8
    with flanges 2 and 4 at 64)."""
    params = {"width": 96, "block_h": 8, "block_w": 32, "memory_h": 8, "memory_w": 16}
    return dict(_sparse_decoder({"name": "local_2d", "params": params}, 512, 8, 12, 3072),
                vocab_size=256, tie_embeddings=False)


@member("reformer", "Kitaev et al. 2020, Reformer: The Efficient Transformer", buckets_at)
def reformer() -> dict:
    """Causal LM: shared-QK LSH attention (4 rounds, buckets of 64), reversible pre-norm
    layers and a feed-forward chunked in 4 along the sequence; sinusoidal positions so
    any length runs (the paper's axial embeddings are a position choice, not used here). At a
    context under 8 buckets the bucket (and chunk) halves until there are 8 (8 at 64)."""
    return dict(model="decoder", d_model=512, dropout=0.1,
                pattern={"name": "causal"},
                kernel={"name": "lsh", "params": {"n_hashes": 4, "bucket_size": 64}},
                position={"name": "sinusoidal"}, heads={"n_heads": 8, "shared_qk": True},
                residual={"name": "pre_norm"}, depth={"name": "reversible", "n_layers": 6},
                ff={"d_ff": 2048, "activation": "gelu", "chunks": 4}, objective={"name": "causal_lm"})


# -- recurrence and learned spans: state axis nn/state/memory.py, nn/position/relative.py,
# nn/patterns/adaptive_span.py. A carried state makes `tfamily train` and `eval` stream contiguous segments
# (data.StreamBatches) by default; data.stream=false trains on random windows, with a note at start.

@member("transformer_xl", "Dai et al. 2019, Transformer-XL: Attentive Language Models Beyond a "
                          "Fixed-Length Context")
def transformer_xl() -> dict:
    """Segment-level recurrence (detached memory of mem_len layer inputs) with relative
    positions (u, v, W_R^k); the enwik8 base model: 12 post-norm layers, d 512, 8 heads,
    ReLU d_ff 2048, segments and memory of 512."""
    return _xl()


def _xl() -> dict:
    return dict(model="decoder", vocab_size=256, d_model=512, dropout=0.1,
                pattern={"name": "causal"}, position={"name": "relative"},
                heads={"n_heads": 8}, residual={"name": "post_norm"}, depth={"n_layers": 12},
                state={"name": "xl_memory", "mem_len": 512}, ff={"d_ff": 2048, "activation": "relu"},
                objective={"name": "causal_lm"})


@member("adaptive_span", "Sukhbaatar et al. 2019, Adaptive Attention Span in Transformers")
def adaptive_span() -> dict:
    """Transformer-XL with a learned span per head (S = 8192, ramp R = 32, L1 2e-6) over a
    memory as long as the largest span; the paper's small enwik8 model (12 layers, d 512)."""
    spec = _xl()
    spec["pattern"] = {"name": "adaptive_span", "params": {"max_span": 8192, "ramp": 32, "l1": 2e-6}}
    spec["state"] = {"name": "xl_memory", "mem_len": 8192}
    return spec


# -- memory for reinforcement learning (Parisotto et al. 2019): identity-map reordering and gates as
# residual choices (nn/residual/: IdentityMap and the gates); the rest is Transformer-XL's.

_PARISOTTO = "Parisotto et al. 2019, Stabilizing Transformers for Reinforcement Learning"


def _rl_xl(residual: dict) -> dict:
    # Section 4 / appendix: 12 layers, embedding 256, 8 heads of dimension 64, memory 512;
    # the feed-forward width (4 x d_model) and dropout 0 are our choices.
    spec = _xl()
    spec.update(d_model=256, dropout=0.0, heads={"n_heads": 8, "d_head": 64}, residual=residual,
                ff={"d_ff": 1024, "activation": "relu"})
    return spec


@member("gtrxl", f"{_PARISOTTO} (GTrXL)")
def gtrxl() -> dict:
    """Gated Transformer-XL: XL memory and relative positions, LayerNorm on each sublayer's
    input only (memory included) and a GRU-type gate in place of each residual sum
    (section 3.2), b_g = 2 so every layer starts near the identity map (z ~= 0.12).
    residual__params={"gate_bias": 0.0} is the paper's ablation; residual__name picks the
    other gates (input_gate, output_gate, highway_gate, sigmoid_tanh_gate), each with its
    own default b_g."""
    return _rl_xl({"name": "gru_gate"})  # b_g: GRUGate's default, 2


@member("trxl_i", f"{_PARISOTTO} (TrXL-I)")
def trxl_i() -> dict:
    """Transformer-XL with the identity-map reordering (section 3.1): x + ReLU(Sublayer(LN(x))),
    memory normalised with the stream; no gate. Same shape as gtrxl."""
    return _rl_xl({"name": "identity_map"})


# -- recurrence in depth: nn/depth/universal.py (shared block, t2t halting),
# nn/position/coordinate.py (position + step, eq. 6-7). ACT on or off is the depth name.

@member("universal_transformer", "Dehghani et al. 2019, Universal Transformers")
def universal_transformer() -> dict:
    """Encoder-decoder whose encoder and decoder each apply one post-norm block (section 2.1:
    LayerNorm after attention and after the transition) recurrently for T = depth.n_layers = 6
    steps, adding the coordinate signal (position + step) before every step instead of input
    positions; feed-forward ReLU transition; the base shape of the vanilla model. ACT is off;
    depth__name="universal_act" turns on per-position halting (t2t semantics, max_steps =
    n_layers, ponder weight 0.01), one ponder loss per side."""
    return dict(model="encoder_decoder", d_model=512, dropout=0.1,
                pattern={"name": "causal"}, position={"name": "none"},
                heads={"n_heads": 8}, residual={"name": "post_norm"},
                depth={"name": "universal", "n_layers": 6}, ff={"d_ff": 2048, "activation": "relu"},
                objective={"name": "seq2seq"})


@member("universal_transformer_lm", "Dehghani et al. 2019, Universal Transformers")
def universal_transformer_lm() -> dict:
    """Decoder-only UT with per-position dynamic halting on (depth 'universal_act': at most
    8 steps, eps 0.01, ponder weight 0.01, halting bias 1): the shape of the paper's LM runs
    is not ours; d 512, 8 heads, ReLU d_ff 2048, bytes. depth__name="universal" turns ACT off
    (a fixed 8 steps)."""
    return dict(model="decoder", vocab_size=256, d_model=512, dropout=0.1,
                pattern={"name": "causal"}, position={"name": "none"},
                heads={"n_heads": 8}, residual={"name": "post_norm"},
                depth={"name": "universal_act", "n_layers": 8}, ff={"d_ff": 2048, "activation": "relu"},
                objective={"name": "causal_lm"})


# -- recurrent members: the depth is one torch.nn RNN/LSTM/GRU (nn/depth/recurrent.py) and
# the state its hidden state, carried over contiguous streams (truncated BPTT) by default. The Transformer
# axes (pattern, kernel, heads, residual, feed-forward) have no part in them: the recurrence is
# the only path between positions. As encoder-decoders, depth.params choose the attention
# (models/rnn_encdec.py): alignment none|dot|general|concat|additive|scaled_dot, attend
# luong|bahdanau, input_feeding, bidirectional.

def _recurrent(model: str, cell: str, d_model: int, n_layers: int, dropout: float, objective: str,
               **params) -> dict:
    return dict(model=model, d_model=d_model, dropout=dropout, position={"name": "none"},
                heads={"n_heads": 1}, depth={"name": cell, "n_layers": n_layers, "params": params},
                state={"name": "rnn_hidden"}, tie_embeddings=False, objective={"name": objective})


@member("rnn_lm", "Mikolov et al. 2010, Recurrent neural network based language model")
def rnn_lm() -> dict:
    """Elman RNN language model (tanh): one recurrent layer, its state carried across segments."""
    return _recurrent("decoder", "rnn", 200, 1, 0.0, "causal_lm")


@member("lstm_lm", "Zaremba et al. 2014, Recurrent Neural Network Regularization")
def lstm_lm() -> dict:
    """The medium LSTM LM: 2 layers of 650, dropout 0.5 on non-recurrent connections, truncated
    backpropagation over segments with the state carried."""
    return _recurrent("decoder", "lstm", 650, 2, 0.5, "causal_lm")


@member("gru_lm", "Cho et al. 2014, Learning Phrase Representations using RNN Encoder-Decoder")
def gru_lm() -> dict:
    """The LSTM LM's shape with gated recurrent units (reset and update gates, Cho et al. 2014)."""
    return _recurrent("decoder", "gru", 650, 2, 0.5, "causal_lm")


@member("lstm_seq2seq", "Sutskever et al. 2014, Sequence to Sequence Learning with Neural Networks")
def lstm_seq2seq() -> dict:
    """4-layer LSTM encoder-decoder of 1000 cells without attention: the decoder starts from the
    encoder's final state and reads out its own state."""
    return _recurrent("encoder_decoder", "lstm", 1000, 4, 0.0, "seq2seq", alignment="none", input_feeding=False)


@member("luong_attention", "Luong et al. 2015, Effective Approaches to Attention-based Neural Machine "
                           "Translation")
def luong_attention() -> dict:
    """Global attention: 4-layer LSTMs of 1000 cells, the current state h_t scores the source
    with 'general' (h_t^T W_a h_s), h~_t = tanh(W_c [c_t; h_t]), input feeding, dropout 0.2."""
    return _recurrent("encoder_decoder", "lstm", 1000, 4, 0.2, "seq2seq", alignment="general",
                      attend="luong", input_feeding=True)


@member("bahdanau_attention", "Bahdanau et al. 2015, Neural Machine Translation by Jointly Learning to "
                              "Align and Translate")
def bahdanau_attention() -> dict:
    """RNNsearch: a bidirectional GRU encoder of 1000 units, the previous state s_{i-1} scores the
    source additively (v_a^T tanh(W_a s_{i-1} + U_a h_j)) and c_i enters s_i and the readout."""
    return _recurrent("encoder_decoder", "gru", 1000, 1, 0.0, "seq2seq", alignment="additive",
                      attend="bahdanau", bidirectional=True)


def __getattr__(name: str):
    if name in REGISTRY:
        return REGISTRY[name].make
    raise AttributeError(f"tfamily.members has no member {name!r}; valid: {', '.join(sorted(REGISTRY))}")
