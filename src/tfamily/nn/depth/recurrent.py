"""A whole recurrent stack as one depth (Elman 1990; LSTM, Hochreiter & Schmidhuber 1997;
GRU, Cho et al. 2014), and its hidden state as a ``State`` (``nn/state/``).

``RecurrentStack`` wraps one ``torch.nn.RNN/LSTM/GRU`` of ``n_layers``: the recurrence is
the depth and, read along time, the only way one position sees another (causal by
construction). ``RNNState`` carries the last hidden state (and, for an LSTM, the cell)
of every layer from one call to the next: over contiguous streams that is truncated
backpropagation through time (Williams & Peng 1990): the carried state is detached at
each segment boundary, so the forward equals one long forward while gradients stop at
the boundary. ``truncate=False`` keeps the graph (the whole history is differentiated).
"""
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ..state import row_mask
from ...registry import DEPTHS, STATES

CELLS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}

Hidden = Tensor | tuple[Tensor, Tensor]


def make_rnn(cell: str, d_in: int, d_hidden: int, n_layers: int, *, dropout: float = 0.0,
             bidirectional: bool = False) -> nn.RNNBase:
    """``torch.nn`` recurrent module, batch first; the Elman RNN uses tanh (Elman 1990)."""
    if cell not in CELLS:
        raise ValueError(f"unknown recurrent cell {cell!r}; valid: {', '.join(CELLS)}")
    # torch warns (and ignores) dropout between layers when there is one layer.
    return CELLS[cell](d_in, d_hidden, n_layers, batch_first=True, bidirectional=bidirectional,
                       dropout=dropout if n_layers > 1 else 0.0)


def top(hidden: Hidden) -> Tensor:
    """The last layer's hidden state h (b, d) of an (L, b, d) hidden (or (h, c) pair)."""
    return (hidden[0] if isinstance(hidden, tuple) else hidden)[-1]


def select_rows(hidden: Hidden, index: Tensor) -> Hidden:
    if isinstance(hidden, tuple):
        return tuple(t.index_select(1, index) for t in hidden)
    return hidden.index_select(1, index)


def check_right_padding(key_padding: Tensor | None) -> None:
    """A recurrence reads left to right, so padding after a row's tokens never reaches them;
    padding before them would, and is refused."""
    if key_padding is None:
        return
    if bool((key_padding[:, 1:] & ~key_padding[:, :-1]).any()):
        raise ValueError("a recurrent stack needs right padding (real tokens first, True then False "
                         "in key_padding); a row has a real token after padding: pad on the right")


class RNNState:
    """A ``State``: the hidden state of every layer, (L, b, d) (LSTM: h and c), carried
    from call to call; ``offset`` counts the tokens seen."""
    citation = ("Williams & Peng 1990 (truncated BPTT): the last (h, c) of every layer, detached at each segment "
                "boundary")

    carried = True  # the trainer keeps it across batches of a contiguous stream

    def __init__(self, cell: str, truncate: bool = True):
        if cell not in CELLS:
            raise ValueError(f"unknown recurrent cell {cell!r}; valid: {', '.join(CELLS)}")
        self.cell, self.truncate = cell, truncate
        self.h: Tensor | None = None
        self.c: Tensor | None = None
        self.offset = 0

    def hidden(self, like: Tensor) -> Hidden | None:
        """What the recurrent module starts from (None = zeros), in ``like``'s dtype and device."""
        if self.h is None:
            return None
        h = self.h.to(device=like.device, dtype=like.dtype)
        return (h, self.c.to(device=like.device, dtype=like.dtype)) if self.cell == "lstm" else h

    def update(self, hidden: Hidden) -> None:
        """Keep the module's final hidden state; detached when truncating (the segment boundary)."""
        h, c = hidden if isinstance(hidden, tuple) else (hidden, None)
        if self.truncate:
            h, c = h.detach(), (c.detach() if c is not None else None)
        self.h, self.c = h, c

    def advance(self, n: int) -> None:
        self.offset += n

    def state_dict(self) -> dict:
        out: dict = {"offset": self.offset, "cell": self.cell}
        if self.h is not None:
            out["h"] = self.h.detach()
            if self.c is not None:
                out["c"] = self.c.detach()
        return out

    def load_state_dict(self, state: dict) -> None:
        if state.get("cell", self.cell) != self.cell:
            raise ValueError(f"saved state is of a {state['cell']!r} stack, this one is {self.cell!r}")
        self.h, self.c, self.offset = state.get("h"), state.get("c"), int(state["offset"])

    def reorder(self, index: Tensor) -> None:
        if self.h is not None:
            self.h = self.h.index_select(1, index)
            self.c = self.c.index_select(1, index) if self.c is not None else None

    def reset(self, rows: Tensor | None = None) -> None:
        """Forget ``rows`` (None: all): their hidden state becomes zeros, torch.nn's initial state."""
        mask = row_mask(rows, self.h.shape[1], self.h.device) if rows is not None and self.h is not None else None
        if rows is None or (mask is not None and bool(mask.all())):
            self.h = self.c = None
            self.offset = 0
            return
        if mask is None:
            return
        keep = (~mask)[None, :, None].to(self.h.dtype)
        self.h = self.h * keep
        self.c = self.c * keep if self.c is not None else None


class RecurrentStack(nn.Module):
    """``x`` (b, n, d) -> (b, n, d) through one ``torch.nn`` recurrent module of n_layers,
    starting from ``state``'s hidden state (zeros without one) and leaving its final one there."""
    citation = ("Elman 1990, h_t = f(W x_t + U h_{t-1}): a stack of recurrent layers, the state carried across "
                "segments (truncated BPTT, Williams & Peng 1990)")
    # The model classes around this stack are GPT's (LanguageModel, CausalLM, Dropout); around it they
    # compute the recurrent LM's equations, so the tour (catalogue/tour.py) cites these for them.
    cites_around = {
        "LanguageModel": "Mikolov et al. 2010, section 2: s(t) = f(U w(t) + W s(t-1)), y(t) = softmax(V s(t)); "
                         "Zaremba et al. 2014, section 3 stacks L layers, h_t^l = cell(h_t^{l-1}, h_{t-1}^l) "
                         "(an LSTM there), the prediction read from h_t^L",
        "CausalLM": "Mikolov et al. 2010, section 2: y(t) is P(w(t+1) | w(t), s(t-1)), trained by cross-entropy "
                    "on the next word",
        "Dropout": "Zaremba et al. 2014, section 3.2: dropout on the non-recurrent connections only, "
                   "h_t^l = LSTM(D(h_t^{l-1}), h_{t-1}^l)",
    }

    def __init__(self, rnn: nn.RNNBase):
        super().__init__()
        if rnn.bidirectional:
            raise ValueError("a language model's recurrent stack must be unidirectional: a backward "
                             "direction would read the tokens it predicts")
        self.rnn = rnn
        self.cell = {nn.LSTM: "lstm", nn.GRU: "gru", nn.RNN: "rnn"}[type(rnn)]

    def __len__(self) -> int:
        return self.rnn.num_layers

    def new_state(self, truncate: bool = True) -> RNNState:
        return RNNState(self.cell, truncate)

    def forward(self, x: Tensor, *, state: RNNState | None = None, key_padding: Tensor | None = None,
                **_) -> Tensor:
        check_right_padding(key_padding)
        if state is not None and not isinstance(state, RNNState):
            raise TypeError(f"a recurrent stack carries an RNNState, got {type(state).__name__}; "
                            f"use the model's new_state()")
        out, hidden = self.rnn(x, state.hidden(x) if state is not None else None)
        if state is not None:
            state.update(hidden)
        return out


# How a recurrent encoder-decoder's decoder reads its encoder (models/rnn_encdec.py, assembled in
# build.py): the recurrent depths' params, with these defaults.
RNN_OPTIONS = {"bidirectional": False, "alignment": "general", "attend": "luong", "input_feeding": True}


def _recurrent(cell: str) -> Callable[..., nn.Module]:
    def make(d_model: int, n_layers: int, dropout: float, bidirectional: bool = RNN_OPTIONS["bidirectional"],
             alignment: str = RNN_OPTIONS["alignment"], attend: str = RNN_OPTIONS["attend"],
             input_feeding: bool = RNN_OPTIONS["input_feeding"]) -> nn.Module:
        # A decoder-only model's stack; checks.check_recurrent refuses the encoder-decoder options there.
        return RecurrentStack(make_rnn(cell, d_model, d_model, n_layers, dropout=dropout))
    return make


# gates: the d x d matrix pairs (input, recurrent) per layer each cell holds (spec/sizes.py counts them).
_GATES = {"rnn": 1, "lstm": 4, "gru": 3}
for _cell in CELLS:
    DEPTHS.register(_cell, _recurrent(_cell), needs=("d_model", "n_layers", "dropout"), recurrent=True,
                    gates=_GATES[_cell])
# The hidden state of the stack's layers, carried between segments (truncated BPTT).
STATES.register("rnn_hidden", lambda layers: layers.new_state, needs=("layers",), carried=True)
