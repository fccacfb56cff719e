"""The Universal Transformer's coordinate embedding: position and recurrence step.

Dehghani et al. 2019, eq. 6-7, added to the state before every recurrent step t:
P^t_{pos,2j} = sin(pos / 10000^{2j/d}) + sin(t / 10000^{2j/d}),
P^t_{pos,2j+1} = cos(pos / 10000^{2j/d}) + cos(t / 10000^{2j/d}).
We keep the paper's interleaved sin/cos layout and 1-based steps t = 1..T, and count
positions from 0 like every other position part here (``Sinusoidal``), so that a KV-cached
decode continues at the cached length. tensor2tensor instead concatenates [sin | cos],
counts steps from 0 and by default learns the step signal; we follow the paper.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..tracing import recording
from .absolute import positions, sinusoid_table


class Coordinate(nn.Module):
    """The signal is computed from device-side ``arange`` alone: the step number used to be copied
    from the host at every recurrent step, and on CUDA such a copy waits for the stream. On an
    H100 the UT then took 3.6x fewer training steps than the vanilla Transformer of the same depth
    in the same time (``experiments/long-runs-h100/long_runs_h100``), where on a CPU the two step
    equally fast; since this change the two run the same steps there
    (``experiments/long-runs-h100/long_runs_h100_offsets``, docs/results/universal.md). The position
    part of the last int (offset, length) is kept and shared by every step of one forward, the step
    part for steps 1..k; both are plain attributes (never saved), rebuilt on another device or mode."""
    citation = ("Dehghani et al. 2019, section 2.1: coordinate signal P^t, sinusoids of position and step added before "
                "every step")

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        self._pos: tuple[tuple, Tensor] | None = None
        self._steps: tuple[tuple, Tensor] | None = None

    def forward(self, x: Tensor, step: int, offset: int | Tensor = 0) -> Tensor:
        """``x``: (b, n, d) states of positions offset..offset+n-1 entering step ``step`` (>= 1);
        ``offset`` may be a (b,) tensor of row offsets, whose signal is computed at each call."""
        if step < 1:
            raise ValueError(f"recurrent steps are counted from 1 (eq. 6-7), got step={step}")
        # inference tensors stay in inference mode; fp64 states get an fp64 table (fp32 otherwise)
        acc = torch.promote_types(x.dtype, torch.float32)
        if recording():  # a cached table would be frozen into the graph at the example's length
            pos = sinusoid_table(positions(offset, x.shape[1], x.device), self.d_model, acc)
            at_step = sinusoid_table(torch.arange(step, step + 1, device=x.device), self.d_model, acc)[0]
            return x + (pos + at_step).to(x.dtype)
        mode = (x.device, torch.is_inference_mode_enabled(), acc)
        if isinstance(offset, Tensor):
            pos = sinusoid_table(positions(offset, x.shape[1], x.device), self.d_model, acc)
        else:
            key = (*mode, offset, x.shape[1])
            if self._pos is None or self._pos[0] != key:
                self._pos = (key, sinusoid_table(positions(offset, x.shape[1], x.device), self.d_model, acc))
            pos = self._pos[1]
        if self._steps is None or self._steps[0] != mode or self._steps[1].shape[0] < step:
            k = max(step, 16 if self._steps is None else 2 * self._steps[1].shape[0])
            self._steps = (mode, sinusoid_table(torch.arange(1, k + 1, device=x.device), self.d_model, acc))
        return x + (pos + self._steps[1][step - 1]).to(x.dtype)

