"""Adaptive Computation Time around a recurrent cell (Graves 2016, arXiv 1603.08983).

For each input step t the wrapped cell ponders for N(t) steps n = 1..N(t). Its input at
ponder step n is x_t with a binary flag appended, 1 at n = 1 and 0 after (section 2: "so
that the network can distinguish the first ponder step"), so the cell's input size is D + 1.
Ponder step n starts from the raw intermediate state s^{n-1} (s^0 = the previous input
step's averaged state). After each update the halting unit (eq. 5)

    h^n = sigmoid(W_h s^n + b_h),   b_h initialised to 1,

reads the new state. N = min{n : sum_{n'<=n} h^{n'} >= 1 - eps} (eq. 6), capped at M;
the remainder R = 1 - sum_{n<N} h^n (eq. 8); the weights p^n = h^n for n < N and p^N = R
(eq. 7) always sum to 1, at the cap too. The state passed on and the output are the
p-weighted means (eq. 9-10); the output y^n is the readout's pre-activation. The ponder
cost rho = N + R (eq. 11) enters the loss with weight tau (eq. 14); N is piecewise
constant, so the gradient reaches the halting unit only through R (eq. 12-13:
d rho / d h^n = -1 for n < N, 0 for n = N).

The state is whatever the cell returns: one tensor (``nn.RNNCell``, ``nn.GRUCell``) or a
tuple (``nn.LSTMCell``: (h, c)); the mean covers every tensor of it, the halting unit reads
all of them concatenated, the readout reads the first (the cell's output h).

Rows of a batch halt at different steps. A halted row gets weight 0 and its state is frozen,
so nothing computed for it after it halts matters; the loop ends as soon as every row has
halted, and ``steps`` reports how many ponder steps each input step executed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...base.numbers import check_int, check_number

CellState = tuple[Tensor, ...]


@dataclass
class ACTOutput:
    """``y``: (b, T, out) p-weighted readouts; ``state``: the cell state after the last step
    (a tensor, or a tuple for an LSTM); ``ponder``: (b,) rho summed over input steps (eq. 11);
    ``n``, ``remainder``: (b, T) N(t) and R(t); ``steps``: ponder steps executed per input step."""
    y: Tensor
    state: Tensor | CellState
    ponder: Tensor
    n: Tensor
    remainder: Tensor
    steps: list[int]


class ACT(nn.Module):
    def __init__(self, cell: nn.Module, readout: nn.Module, *, max_steps: int = 100, eps: float = 0.01,
                 halting_bias: float = 1.0):
        """``cell``: a ``torch.nn`` RNN/GRU/LSTM cell of input size D + 1 (the flag);
        ``readout``: maps the cell output h (b, hidden) to pre-activations (b, out)."""
        super().__init__()
        if not isinstance(cell, nn.RNNCellBase):
            raise TypeError(f"ACT wraps a torch.nn RNNCell, GRUCell or LSTMCell, got {type(cell).__name__}")
        check_int("ACT max_steps (M)", max_steps, 1)
        check_number("ACT eps", eps, 0.0, 1.0, lo_open=True, hi_open=True, hint="Graves: 0.01")
        self.cell, self.readout, self.max_steps, self.eps = cell, readout, max_steps, eps
        self.n_state = 2 if isinstance(cell, nn.LSTMCell) else 1  # LSTM: (h, c)
        self.halt = nn.Linear(self.n_state * cell.hidden_size, 1)
        nn.init.constant_(self.halt.bias, halting_bias)  # Graves 2016, section 2: b_h = 1

    @property
    def input_size(self) -> int:
        """D: the size of x_t, one less than the cell's (the first-step flag)."""
        return self.cell.input_size - 1

    def _cell(self, x: Tensor, s: CellState | None) -> CellState:
        out = self.cell(x, None if s is None else (s[0] if self.n_state == 1 else s))
        return (out,) if self.n_state == 1 else tuple(out)

    def step(self, x: Tensor, state: CellState | None) -> tuple[Tensor, CellState, Tensor, Tensor, int]:
        """One input step. ``x``: (b, D). Returns (y (b, out), state, N (b,), R (b,), steps)."""
        b = x.shape[0]
        first, later = x.new_ones(b, 1), x.new_zeros(b, 1)  # the first-ponder-step flag
        cum = x.new_zeros(b)  # sum of h^n over the ponder steps before this one
        running = torch.ones(b, dtype=torch.bool, device=x.device)
        n_steps = x.new_zeros(b)
        remainder = x.new_zeros(b)
        y_acc: Tensor | float = 0.0
        s_acc: list = [0.0] * self.n_state
        s = state
        steps = 0
        for n in range(1, self.max_steps + 1):
            steps = n
            new = self._cell(torch.cat([x, first if n == 1 else later], dim=-1), s)
            # A halted row keeps its state: nothing computed for it afterwards matters.
            s = new if s is None else tuple(torch.where(running[:, None], a, o) for a, o in zip(new, s))
            h = torch.sigmoid(self.halt(torch.cat(s, dim=-1))).squeeze(-1)
            halts = running & ((cum + h >= 1.0 - self.eps) | (n == self.max_steps))
            r = 1.0 - cum  # eq. 8, R = 1 - sum_{n<N} h^n
            p = torch.where(halts, r, torch.where(running, h, torch.zeros_like(h)))
            y_acc = y_acc + p[:, None] * self.readout(s[0])
            s_acc = [a + p[:, None] * t for a, t in zip(s_acc, s)]
            n_steps = torch.where(halts, torch.full_like(n_steps, float(n)), n_steps)
            remainder = torch.where(halts, r, remainder)
            cum = cum + torch.where(running & ~halts, h, torch.zeros_like(h))
            running = running & ~halts
            if not bool(running.any()):
                break
        return y_acc, tuple(s_acc), n_steps, remainder, steps

    def forward(self, x: Tensor, state: Tensor | CellState | None = None) -> ACTOutput:
        """``x``: (b, T, D) inputs; ``state``: the cell state to start from (None: zeros)."""
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"ACT input must be (batch, T, {self.input_size}) (the cell's input size "
                             f"{self.cell.input_size} minus the first-step flag), got {tuple(x.shape)}")
        s: CellState | None = None if state is None else ((state,) if isinstance(state, Tensor) else tuple(state))
        ys, ns, rs, steps = [], [], [], []
        for t in range(x.shape[1]):
            y, s, n, r, k = self.step(x[:, t], s)
            ys.append(y)
            ns.append(n)
            rs.append(r)
            steps.append(k)
        n, r = torch.stack(ns, dim=1), torch.stack(rs, dim=1)
        # eq. 11: rho = N + R; N carries no gradient (it is built from comparisons).
        out_state = s[0] if self.n_state == 1 else s
        return ACTOutput(torch.stack(ys, dim=1), out_state, (n + r).sum(dim=1), n, r, steps)
