"""The two attentional recurrent decoders, and the state each decoding step carries.

Luong et al. 2015 (section 3, figure 2): the stack first takes the input, then its *current*
top state h_t scores the source; c_t = sum_s a_t(s) h_s and the attentional state
h~_t = tanh(W_c [c_t; h_t]) is read out (eq. 5-6). With input feeding (section 3.3) h~_{t-1}
is concatenated to the next input, so the stack knows its past alignment decisions.
Without a score (``score=None``) h_t itself is read out: the encoder-decoder of Sutskever
et al. 2014, started from the encoder's final state.

Bahdanau et al. 2015 (section 3.1, appendix A.2.2): the *previous* state s_{i-1} scores the
source (eq. 6), the context c_i enters the next state s_i = f(s_{i-1}, y_{i-1}, c_i) (eq. 1,
here as [E y_{i-1}; c_i] fed to the stack) and the readout g(y_{i-1}, s_i, c_i) (eq. 4; a
tanh layer in place of the paper's maxout). s_0 = tanh(W_s <-h_1): the backward encoder's
state at the first source token (its final state), or the forward final state for a
unidirectional encoder.

So at step i Bahdanau's weights depend only on tokens fed before step i; Luong's depend on
the token fed at step i too (tests/models/test_rnn_encdec.py checks both).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..nn.alignment import attend
from ..nn.depth import Hidden, select_rows, top
from ..nn.state import row_mask


class DecoderState:
    """A ``State`` for recurrent decoding: the stack's hidden state (h, c) of every layer, the
    previous attentional vector h~ (input feeding), and the source keys of the score (computed
    once per source). Beam search reorders all three with the beams."""
    citation = "Luong et al. 2015, section 3.3: the stack's (h, c) and h~_{t-1} carried step to step (and per beam)"

    carried = False  # source/target pairs are independent: never kept across training batches

    def __init__(self) -> None:
        self.hidden: Hidden | None = None
        self.feed: Tensor | None = None
        self.keys: Tensor | None = None
        self.offset = 0

    @property
    def started(self) -> bool:
        return self.hidden is not None

    def start(self, hidden: Hidden, keys: Tensor | None, feed: Tensor | None) -> None:
        self.hidden, self.keys, self.feed = hidden, keys, feed

    def advance(self, n: int) -> None:
        self.offset += n

    def state_dict(self) -> dict:
        out: dict = {"offset": self.offset}
        if self.hidden is not None:
            h, c = self.hidden if isinstance(self.hidden, tuple) else (self.hidden, None)
            out["h"] = h
            if c is not None:
                out["c"] = c
        for name in ("feed", "keys"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def load_state_dict(self, state: dict) -> None:
        h, c = state.get("h"), state.get("c")
        self.hidden = (h, c) if c is not None else h
        self.feed, self.keys, self.offset = state.get("feed"), state.get("keys"), int(state["offset"])

    def reorder(self, index: Tensor) -> None:
        if self.hidden is not None:
            self.hidden = select_rows(self.hidden, index)
        self.feed = self.feed.index_select(0, index) if self.feed is not None else None
        self.keys = self.keys.index_select(0, index) if self.keys is not None else None

    def reset(self, rows: Tensor | None = None) -> None:
        """All rows only: a row restarts from its own source's encoding, which this state does not hold."""
        if rows is not None and self.hidden is not None:
            b = top(self.hidden).shape[0]
            mask = row_mask(rows, b)
            if not bool(mask.all()):
                raise ValueError(f"a decoder state cannot forget some rows ({mask.nonzero().flatten().tolist()} of "
                                 f"{b}): each restarts from its source's encoding; decode them again")
        self.hidden = self.feed = self.keys = None
        self.offset = 0


class LuongDecoder(nn.Module):
    citation = ("Luong et al. 2015, section 3, eq. 5-6: the current h_t scores the source, h~_t = tanh(W_c [c_t; "
                "h_t]); input feeding, section 3.3")

    def __init__(self, rnn: nn.RNNBase, score: nn.Module | None, d_model: int, d_context: int,
                 input_feeding: bool):
        super().__init__()
        self.rnn, self.score, self.input_feeding = rnn, score, input_feeding
        # W_c of eq. 5; without a score there is no context and h_t is the readout.
        self.combine = nn.Linear(d_context + d_model, d_model, bias=False) if score is not None else None
        self.d_model = d_model

    def initial(self, final: Hidden, b: int, like: Tensor) -> tuple[Hidden, Tensor | None]:
        """The stack starts from the encoder's final state (section 4.1); h~_0 = 0."""
        feed = like.new_zeros(b, self.d_model) if self.input_feeding else None
        return final, feed

    def readout(self, h: Tensor, values: Tensor, keys: Tensor | None,
                padding: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``h`` (b, n, d) current states -> (h~ (b, n, d), weights (b, n, m))."""
        if self.score is None:
            return h, None
        context, weights = attend(self.score(h, keys), values, padding)
        return torch.tanh(self.combine(torch.cat([context, h], -1))), weights

    def forward(self, y: Tensor, values: Tensor, padding: Tensor | None,
                state: DecoderState) -> tuple[Tensor, Tensor | None]:
        """``y`` (b, n, d) embedded inputs -> (outputs (b, n, d), weights (b, n, m) or None)."""
        if not self.input_feeding:  # no step depends on an earlier readout: run the stack once
            h, state.hidden = self.rnn(y, state.hidden)
            return self.readout(h, values, state.keys, padding)
        outs, weights = [], []
        for t in range(y.shape[1]):
            h, state.hidden = self.rnn(torch.cat([y[:, t:t + 1], state.feed[:, None]], -1), state.hidden)
            out, w = self.readout(h, values, state.keys, padding)
            state.feed = out[:, 0]
            outs.append(out)
            weights.append(w)
        return torch.cat(outs, 1), (torch.cat(weights, 1) if self.score is not None else None)


class BahdanauDecoder(nn.Module):
    citation = "Bahdanau et al. 2015, eq. 4-6 and A.2.2: s_{i-1} scores the source, c_i enters s_i and the readout"

    def __init__(self, rnn: nn.RNNBase, score: nn.Module, d_model: int, d_context: int, d_final: int):
        super().__init__()
        self.rnn, self.score = rnn, score
        self.init = nn.Linear(d_final, d_model)                              # W_s of A.2.2
        self.out = nn.Linear(d_model + d_model + d_context, d_model)         # g(y_{i-1}, s_i, c_i), eq. 4
        self.lstm = isinstance(rnn, nn.LSTM)

    def initial(self, final: Hidden, b: int, like: Tensor) -> tuple[Hidden, None]:
        """s_0 = tanh(W_s <-h_1) in every layer of the stack (LSTM cells start at 0). <-h_1 is the
        top encoder layer's backward final state: the last row of torch's (L * 2, b, d) layout
        (the forward final state for a unidirectional encoder)."""
        first_backward = (final[0] if isinstance(final, tuple) else final)[-1]
        s0 = torch.tanh(self.init(first_backward))[None].expand(self.rnn.num_layers, -1, -1).contiguous()
        return ((s0, torch.zeros_like(s0)) if self.lstm else s0), None

    def forward(self, y: Tensor, values: Tensor, padding: Tensor | None,
                state: DecoderState) -> tuple[Tensor, Tensor]:
        outs, weights = [], []
        for i in range(y.shape[1]):
            # eq. 6: e_ij = a(s_{i-1}, h_j), scored before the step's input enters the stack
            context, w = attend(self.score(top(state.hidden)[:, None], state.keys), values, padding)
            s, state.hidden = self.rnn(torch.cat([y[:, i:i + 1], context], -1), state.hidden)
            outs.append(torch.tanh(self.out(torch.cat([s, y[:, i:i + 1], context], -1))))
            weights.append(w)
        return torch.cat(outs, 1), torch.cat(weights, 1)
