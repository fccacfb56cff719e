"""Memory torsos for the actor-critic: one environment step in, one feature vector out.

A torso takes ``x`` (b, d_model), one step of every environment row, and the rows'
``State`` (``nn/state/``): it reads and advances the state, and an episode end is a
``state.reset(rows)`` that makes those rows start afresh while the others keep their
memory. ``StackTorso`` is any family stack with XL memory (``gtrxl``, ``trxl_i``,
``transformer_xl``): each step is a segment of length 1 that attends over the last
``mem_len`` layer inputs (Dai et al. 2019, section 3.2; Parisotto et al. 2019 use the
same memory). ``RecurrentTorso`` is the LSTM or GRU baseline: the library's recurrent stack
(``nn/depth/recurrent.py``) with its hidden state, an ``RNNState``.

``trace`` and ``replay`` serve the PPO update (``policy.py``). The rollout keeps each
step's ``trace`` (what the replay cannot recompute; empty for the torsos here) and
``replay`` recomputes a whole rollout segment from the state it started with. An XL
torso replays the rollout as one segment of T steps over the memory it started from,
[SG(M), x] in Parisotto et al.'s block (and Dai et al. eq. 1): the memory from before
the rollout is a stop-gradient, the rollout's own steps are one segment through which
gradients flow. ``SegmentMemory.restrict`` masks each query to what it saw when it
acted: the last ``mem_len`` steps, none before its row's latest episode start. With
the weights that acted this is the rollout's computation (ratio 1); the keys are
projected once per step, not once per step that sees them. An LSTM/GRU replays step by
step, back-propagating through the segment.
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from ..nn.state import State
from ..base.numbers import check_int

RECURRENT = {"lstm": "lstm_lm", "gru": "gru_lm"}  # the member whose recurrent stack a torso takes


class Torso(Protocol):
    d_model: int

    def new_state(self) -> State: ...

    def __call__(self, x: Tensor, state: State) -> Tensor:
        """(b, d_model) -> (b, d_model) for one step; advances ``state``."""

    def trace(self, state: State) -> Tensor:
        """After a step, what the replay needs of it: (b, ...) per row."""

    def replay(self, x: Tensor, starts: Tensor, state: State, trace: Tensor) -> Tensor:
        """A rollout segment again: ``x`` (T, b, d), ``starts`` (T, b) (reset the row before step
        t), ``state`` before step 0 and before those resets (consumed), ``trace`` (T, b, ...)
        -> (T, b, d)."""


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

    def trace(self, state: State) -> Tensor:
        """Nothing to keep: the replay recomputes each step's layer inputs (the memory it
        starts from is in the stored state)."""
        memory = next(t for k, t in state.state_dict().items() if k.startswith("memory."))
        return memory.new_zeros(memory.shape[0], 0)

    def replay(self, x: Tensor, starts: Tensor, state: State, trace: Tensor) -> Tensor:
        """``x`` (T, b, d), ``starts`` (T, b), ``state`` before step 0 -> (T, b, d): the rollout
        as one segment of T steps over the stored memory, each step seeing what it saw when it
        acted (``SegmentMemory.restrict``: its last ``mem_len`` steps, none before its episode's
        start)."""
        T = x.shape[0]
        saved = state.state_dict()
        replay = self.make_state()
        replay.load_state_dict(saved)
        replay.restrict(T, starts=starts.T, window=int(saved["mem_len"]))
        h = self.stack(self.position(x.transpose(0, 1), replay.offset), state=replay)
        return h.transpose(0, 1)


def _old_names(state_dict: dict, prefix: str, *_) -> None:
    """Checkpoints from before the torso held a ``RecurrentStack``: ``rnn.*`` becomes ``stack.rnn.*``."""
    for key in [k for k in state_dict if k.startswith(prefix + "rnn.")]:
        state_dict[prefix + "stack." + key[len(prefix):]] = state_dict.pop(key)


class RecurrentTorso(nn.Module):
    """The library's ``RecurrentStack`` (one torch LSTM/GRU, built by ``build.stack``) one step at a
    time; its ``RNNState`` keeps the graph (``truncate=False``) so the replay back-propagates
    through the rollout segment, and a reset row restarts from zeros, as torch RNNs begin."""

    def __init__(self, stack: nn.Module, d_model: int):
        super().__init__()
        self.stack, self.d_model = stack, d_model
        self._register_load_state_dict_pre_hook(_old_names)

    def new_state(self) -> State:
        return self.stack.new_state(truncate=False)

    def forward(self, x: Tensor, state: State) -> Tensor:
        y = self.stack(x[:, None], state=state)
        state.advance(1)
        return y[:, 0]

    def trace(self, state: State) -> Tensor:
        """Nothing to keep: the replay recomputes the hidden state."""
        return state.h.new_zeros(state.h.shape[1], 0)

    def replay(self, x: Tensor, starts: Tensor, state: State, trace: Tensor) -> Tensor:
        """Step by step from ``state`` with the rows reset where ``starts``: (T, b, d) -> (T, b, d)."""
        out = []
        for t in range(x.shape[0]):
            state.reset(starts[t])
            out.append(self(x[t], state))
        return torch.stack(out)


def clone_state(torso: Torso, state: State) -> State:
    """An independent copy of ``state`` (tensors are shared: states replace, never mutate them)."""
    copy = torso.new_state()
    copy.load_state_dict(dict(state.state_dict()))
    return copy


def torso_spec(member: str, d_model: int, n_layers: int, n_heads: int, mem_len: int,
               gate_bias: float | None = None):
    """The spec of a family member resized for RL; refuses members without XL memory.
    ``gate_bias``: the residual gate's b_g (Parisotto et al. 2019, section 3.2; the paper's ablation
    sets it to 0), refused by the spec for residuals without a gate."""
    from .. import members
    from ..spec import Spec
    spec = members.get(member)()
    if not spec.state.keeps_memory:
        valid = sorted(n for n in members.REGISTRY if members.get(n)().state.keeps_memory)
        raise ValueError(f"member {member!r} has no memory across steps (state {spec.state.name!r}); "
                         f"a torso needs XL memory: {', '.join(valid + list(RECURRENT))}")
    if spec.pattern.name != "causal" or spec.pattern.per_layer:
        # The replay's windows assume each step sees its whole memory (``StackTorso.replay``).
        raise ValueError(f"member {member!r} uses attention pattern {spec.pattern.name!r}; a torso attends over "
                         f"its whole memory (pattern 'causal'): use gtrxl, trxl_i or transformer_xl")
    check_int("mem_len", mem_len, 1, hint="a memory torso needs the steps it can recall")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    d = spec.to_dict()
    # Dropout 0: the PPO update must see the same function as the rollout (ratio 1 at its start).
    d.update(d_model=d_model, dropout=0.0, attn_dropout=0.0, vocab_size=2)
    d["heads"] = {**d["heads"], "n_heads": n_heads, "d_head": d_model // n_heads}
    d["depth"] = {**d["depth"], "n_layers": n_layers}
    d["ff"] = {**d["ff"], "d_ff": 4 * d_model}
    d["state"] = {**d["state"], "mem_len": mem_len}
    if gate_bias is not None:
        d["residual"] = {**d["residual"], "params": {**d["residual"].get("params", {}), "gate_bias": gate_bias}}
    return Spec.from_dict(d)


def build_torso(member: str, *, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                mem_len: int = 64, gate_bias: float | None = None) -> nn.Module:
    """A torso by name: ``lstm`` / ``gru`` or a family member with XL memory."""
    if member in RECURRENT:
        if gate_bias is not None:
            raise ValueError(f"gate_bias={gate_bias!r} sets a residual gate's b_g; the {member} torso has no "
                             f"residual gate (use it with gtrxl)")
        from .. import members
        from ..build import stack
        spec = members.get(RECURRENT[member])(d_model=d_model, dropout=0.0, depth__n_layers=n_layers)
        return RecurrentTorso(stack(spec, n_layers), d_model)
    from ..build import input_position, stack, state
    spec = torso_spec(member, d_model, n_layers, n_heads, mem_len, gate_bias)
    layers = stack(spec, spec.depth.n_layers)
    return StackTorso(input_position(spec), layers, state(spec, layers), d_model)
