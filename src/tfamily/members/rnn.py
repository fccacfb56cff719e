"""The recurrent members, the family's RNN-era baselines: no Transformer base recipe, each function
returns its whole spec (``family.recurrent``); ``tfamily.members`` lists them after the Transformer
members."""
from __future__ import annotations

from .family import recurrent


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


@recurrent("rnn_lm", "Mikolov et al. 2010, Recurrent neural network based language model")
def rnn_lm() -> dict:
    """Elman RNN language model (tanh): one recurrent layer, its state carried across segments."""
    return _recurrent("decoder", "rnn", 200, 1, 0.0, "causal_lm")


@recurrent("lstm_lm", "Zaremba et al. 2014, Recurrent Neural Network Regularization")
def lstm_lm() -> dict:
    """The medium LSTM LM: 2 layers of 650, dropout 0.5 on non-recurrent connections, truncated
    backpropagation over segments with the state carried."""
    return _recurrent("decoder", "lstm", 650, 2, 0.5, "causal_lm")


@recurrent("gru_lm", "Cho et al. 2014, Learning Phrase Representations using RNN Encoder-Decoder")
def gru_lm() -> dict:
    """The LSTM LM's shape with gated recurrent units (reset and update gates, Cho et al. 2014)."""
    return _recurrent("decoder", "gru", 650, 2, 0.5, "causal_lm")


@recurrent("lstm_seq2seq", "Sutskever et al. 2014, Sequence to Sequence Learning with Neural Networks")
def lstm_seq2seq() -> dict:
    """4-layer LSTM encoder-decoder of 1000 cells without attention: the decoder starts from the
    encoder's final state and reads out its own state."""
    return _recurrent("encoder_decoder", "lstm", 1000, 4, 0.0, "seq2seq", alignment="none", input_feeding=False)


@recurrent("luong_attention", "Luong et al. 2015, Effective Approaches to Attention-based Neural Machine "
                           "Translation")
def luong_attention() -> dict:
    """Global attention: 4-layer LSTMs of 1000 cells, the current state h_t scores the source
    with 'general' (h_t^T W_a h_s), h~_t = tanh(W_c [c_t; h_t]), input feeding, dropout 0.2."""
    return _recurrent("encoder_decoder", "lstm", 1000, 4, 0.2, "seq2seq", alignment="general",
                      attend="luong", input_feeding=True)


@recurrent("bahdanau_attention", "Bahdanau et al. 2015, Neural Machine Translation by Jointly Learning to "
                              "Align and Translate")
def bahdanau_attention() -> dict:
    """RNNsearch: a bidirectional GRU encoder of 1000 units, the previous state s_{i-1} scores the
    source additively (v_a^T tanh(W_a s_{i-1} + U_a h_j)) and c_i enters s_i and the readout."""
    return _recurrent("encoder_decoder", "gru", 1000, 1, 0.0, "seq2seq", alignment="additive",
                      attend="bahdanau", bidirectional=True)
