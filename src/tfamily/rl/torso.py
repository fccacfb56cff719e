"""Memory torsos for the actor-critic: one environment step in, one feature vector out.

A torso takes ``x`` (b, d_model), one step of every environment row, and the rows'
``State`` (``nn/cache.py``): it reads and advances the state, and an episode end is a
``state.reset(rows)`` that makes those rows start afresh while the others keep their
memory. ``StackTorso`` is any family stack with XL memory (``gtrxl``, ``trxl_i``,
``transformer_xl``): each step is a segment of length 1 that attends over the last
``mem_len`` layer inputs (Dai et al. 2019, section 3.2; Parisotto et al. 2019 use the
same memory). ``RecurrentTorso`` is a ``torch.nn`` LSTM or GRU baseline whose hidden
state is a ``RecurrentState``.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from ..nn.cache import State, row_mask

RECURRENT = {"lstm": nn.LSTM, "gru": nn.GRU}


class Torso(Protocol):
    d_model: int

    def new_state(self) -> State: ...

    def __call__(self, x: Tensor, state: State) -> Tensor:
        """(b, d_model) -> (b, d_model) for one step; advances ``state``."""


class StackTorso(nn.Module):
    def __init__(self, position: nn.Module, stack: nn.Module, make_state, d_model: int):
        super().__init__()
        self.position, self.stack, self.make_state, self.d_model = position, stack, make_state, d_model

    def new_state(self) -> State:
        return self.make_state()

    def forward(self, x: Tensor, state: State) -> Tensor:
        h = self.stack(self.position(x[:, None], state.offset), state=state)
        state.advance(1)  # this step's layer inputs join the memory
        return h[:, 0]


class RecurrentState:
    """The hidden state of an LSTM (h, c) or GRU (h), (layers, b, d) each; a reset row
    restarts from zeros, which is how ``torch.nn`` RNNs begin a sequence."""

    carried = True

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.tensors: dict[str, Tensor | None] = dict.fromkeys(names)
        self.offset = 0

    def advance(self, n: int) -> None:
        self.offset += n

    def reset(self, rows: Tensor | None = None) -> None:
        h = self.tensors[self.names[0]]
        if rows is None or h is None:
            self.tensors = dict.fromkeys(self.names) if rows is None else self.tensors
            return
        mask = row_mask(rows, h.shape[1], h.device)
        if bool(mask.any()):  # out of place: the replay's graph keeps the old tensors
            self.tensors = {k: t.masked_fill(mask[None, :, None], 0.0) for k, t in self.tensors.items()}

    def reorder(self, index: Tensor) -> None:
        self.tensors = {k: None if t is None else t.index_select(1, index) for k, t in self.tensors.items()}

    def state_dict(self) -> dict:
        return {"offset": self.offset, **{k: t for k, t in self.tensors.items() if t is not None}}

    def load_state_dict(self, state: dict) -> None:
        self.tensors = {k: state.get(k) for k in self.names}
        self.offset = int(state["offset"])


class RecurrentTorso(nn.Module):
    def __init__(self, kind: str, d_model: int, n_layers: int = 1):
        super().__init__()
        if kind not in RECURRENT:
            raise ValueError(f"recurrent torso {kind!r} is not one of {', '.join(RECURRENT)}")
        self.kind, self.d_model = kind, d_model
        self.rnn = RECURRENT[kind](d_model, d_model, num_layers=n_layers, batch_first=True)

    def new_state(self) -> RecurrentState:
        return RecurrentState(("h", "c") if self.kind == "lstm" else ("h",))

    def forward(self, x: Tensor, state: RecurrentState) -> Tensor:
        t = state.tensors
        if t["h"] is None:
            hidden = None
        else:
            hidden = (t["h"], t["c"]) if self.kind == "lstm" else t["h"]
        y, hidden = self.rnn(x[:, None], hidden)
        state.tensors = dict(zip(state.names, hidden if self.kind == "lstm" else (hidden,)))
        state.advance(1)
        return y[:, 0]


def clone_state(torso: Torso, state: State) -> State:
    """An independent copy of ``state`` (tensors are shared: states replace, never mutate them)."""
    copy = torso.new_state()
    copy.load_state_dict(dict(state.state_dict()))
    return copy


def torso_spec(member: str, d_model: int, n_layers: int, n_heads: int, mem_len: int):
    """The spec of a family member resized for RL; refuses members without XL memory."""
    from .. import members
    from ..spec import Spec
    spec = members.get(member)()
    if spec.state.name != "xl_memory":
        valid = sorted(n for n in members.REGISTRY if members.get(n)().state.name == "xl_memory")
        raise ValueError(f"member {member!r} has no memory across steps (state {spec.state.name!r}); "
                         f"a torso needs XL memory: {', '.join(valid + list(RECURRENT))}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    d = spec.to_dict()
    # Dropout 0: the PPO update must see the same function as the rollout (ratio 1 at its start).
    d.update(d_model=d_model, dropout=0.0, attn_dropout=0.0, vocab_size=2)
    d["heads"] = {**d["heads"], "n_heads": n_heads, "d_head": d_model // n_heads}
    d["depth"] = {**d["depth"], "n_layers": n_layers}
    d["ff"] = {**d["ff"], "d_ff": 4 * d_model}
    d["state"] = {**d["state"], "mem_len": mem_len}
    return Spec.from_dict(d)


def build_torso(member: str, *, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                mem_len: int = 64) -> nn.Module:
    """A torso by name: ``lstm`` / ``gru`` or a family member with XL memory."""
    if member in RECURRENT:
        return RecurrentTorso(member, d_model, n_layers)
    from ..build import input_position, stack
    from ..registry import STATES
    spec = torso_spec(member, d_model, n_layers, n_heads, mem_len)
    layers = stack(spec, spec.depth.n_layers)
    make_state = STATES.make(spec.state.name, spec.state.params, spec=spec, layers=layers)
    return StackTorso(input_position(spec), layers, make_state, d_model)
