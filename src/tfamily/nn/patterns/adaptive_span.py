"""Adaptive attention span (Sukhbaatar et al. 2019): a learned soft pattern.

Each head h has a span z_h in [0, S]; the weight on a key x positions back is
multiplied by the ramp (section 3, eq. 3)

    m_z(x) = clamp((R + z - x) / R, 0, 1)

and renormalised: a_tx = m_z(t - x) exp(s_tx) / sum_r m_z(t - r) exp(s_tr). That
equals softmax(s + log m_z), so the mask enters any kernel as an additive score
bias (log 0 = -inf hides a key) and composes with relative-position biases and
XL memory. z is learned through the ramp with an L1 penalty (section 3:
lambda times the mean span, added to the loss via ``aux_loss``) and clamped to
[0, S] after each optimiser step (``after_step``).

Dynamic span (section 3, "Dynamic attention span"): z_t = S sigmoid(v^T x_t + b)
per head and position. We read x_t through the concatenated queries, W_q x_t + b_q,
which is a full-rank reparametrisation of x_t when n_heads * d_head = d_model.

Compute falls as spans shrink: keys farther back than the largest span plus the
ramp get zero weight from every head, so they are cut before the kernel runs
(``soften``), and XL memory keeps only what some head can still see
(``memory_needed``, used by ``SegmentMemory``).
"""
from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from ...registry import PATTERNS
from ..tracing import recording
from ...base.numbers import check_int, check_number


class AdaptiveSpan(nn.Module):
    """A soft causal pattern. Its hard support (``mask_mod``) is a causal window of
    ``max_span`` keys; inside it the learned ramp decides the weights."""
    citation = "Sukhbaatar et al. 2019, section 3, eq. 3: m_z(x) = clamp((R + z - x) / R, 0, 1), L1 on z"

    name = "adaptive_span"
    causal = True

    def __init__(self, n_heads: int, d_head: int, *, max_span: int, ramp: int = 32, init: float = 0.0,
                 l1: float = 2e-6, dynamic: bool = False):
        super().__init__()
        for key, value, lo in (("max_span", max_span, 1), ("ramp", ramp, 1)):
            check_int(f"adaptive_span {key}", value, lo)
        check_number("adaptive_span init", init, 0.0, 1.0, hint="the initial span as a fraction of max_span")
        if not isinstance(l1, (int, float)) or l1 < 0:
            raise ValueError(f"adaptive_span l1 must be a number >= 0, got {l1!r}")
        self.n_heads, self.max_span, self.ramp, self.l1 = n_heads, max_span, ramp, float(l1)
        self.dynamic = bool(dynamic)
        self.trim = True  # cut keys no head can see (tests switch it off to compare)
        if self.dynamic:
            # v = 0 and b = logit(init): every z_t starts at init * S, as the static spans do.
            self.gate = nn.Linear(n_heads * d_head, n_heads)
            nn.init.zeros_(self.gate.weight)
            p = min(max(float(init), 1e-4), 1 - 1e-4)
            nn.init.constant_(self.gate.bias, math.log(p / (1 - p)))
            self.last_spans: Tensor | None = None
        else:
            # z = S * frac: the fraction is the parameter, as in the paper's code, so one
            # learning rate suits every max_span.
            self.span_frac = nn.Parameter(torch.full((n_heads,), float(init)))

    # -- the pattern -------------------------------------------------------------------
    def mask_mod(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        d = q_idx - kv_idx
        return (d >= 0) & (d < self.max_span)

    # -- spans -------------------------------------------------------------------------
    def spans(self) -> Tensor:
        """Static: z per head, (h,). Dynamic: the mean z_t per head over the last call."""
        if self.dynamic:
            if self.last_spans is None:
                return torch.sigmoid(self.gate.bias.detach()) * self.max_span
            return self.last_spans.detach().float().mean(dim=(0, 2))
        return self.span_frac * self.max_span

    def _z(self, q: Tensor) -> Tensor:
        """Spans broadcastable to (b, h, n, m): (h, 1, 1) static, (b, h, n, 1) dynamic."""
        if not self.dynamic:
            return (self.span_frac * self.max_span)[:, None, None]
        z = self.max_span * torch.sigmoid(self.gate(rearrange(q, "b h n e -> b n (h e)")).float())
        z = rearrange(z, "b n h -> b h n 1")
        self.last_spans = z[..., 0]
        return z

    def reach(self, z_max: float | None = None) -> int:
        """How many distances (0, 1, ...) some head still weights: min(S, ceil(max z + R)).

        A ramp value below 1e-4 / R counts as zero (``soften`` applies the same cut), so
        float noise in z (0.3 * 100 = 30.000001) does not keep a whole extra key."""
        if z_max is None:
            z_max = float(self.spans().detach().max()) if not self.dynamic else self._dynamic_max()
        return int(max(1, min(self.max_span, math.ceil(z_max + self.ramp - 1e-4))))

    def _dynamic_max(self) -> float:
        # The gate is unbounded below only through sigmoid, so S bounds it; the last call's
        # largest span is the best guess for the next segment's reach.
        return self.max_span if self.last_spans is None else float(self.last_spans.detach().max())

    def memory_needed(self) -> int:
        """Memory entries the next segment's first query can still see (for SegmentMemory)."""
        return self.reach() - 1

    # -- the soft part, applied by SoftPatternKernel -----------------------------------
    def soften(self, q: Tensor, k: Tensor, v: Tensor, *, q_offset: int, key_padding: Tensor | None,
               bias: Tensor | None) -> tuple[Tensor, Tensor, int, Tensor | None, Tensor]:
        """Trim keys beyond every head's reach and add log m_z to the score bias.

        Returns ``(k, v, q_offset, key_padding, bias)`` for the kept keys; query i
        stays at distance q_offset + i - j from kept key j.
        """
        z = self._z(q)
        if recording():  # the same reach as a tensor: no host read; nothing is trimmed
            reach = torch.ceil(z.detach().max() + self.ramp - 1e-4).clamp(1, self.max_span)
        else:
            reach = self.reach(float(z.detach().max()))
        start = 0
        if self.trim and not recording():
            # Key j is q_offset - j back from the first query, farther from every later one.
            start = max(0, q_offset - reach + 1)
        if start:
            k, v = k[..., start:, :], v[..., start:, :]
            key_padding = key_padding[:, start:] if key_padding is not None else None
            bias = bias[..., start:] if bias is not None else None
            q_offset -= start
        n, m = q.shape[-2], k.shape[-2]
        x = (torch.arange(q_offset, q_offset + n, device=q.device)[:, None]
             - torch.arange(m, device=q.device)[None, :]).float()
        mask = ((self.ramp + z - x) / self.ramp).clamp(0, 1) * (x < reach)
        # log of the ramp; where() keeps the gradient finite where the ramp is exactly 0.
        soft = torch.where(mask > 0, mask.clamp_min(1e-30).log(), torch.full_like(mask, float("-inf")))
        while soft.dim() < 4:
            soft = soft[None]
        bias = soft if bias is None else bias + soft
        return k, v, q_offset, key_padding, bias

    # -- training hooks ------------------------------------------------------------------
    def aux_loss(self) -> Tensor:
        """lambda * mean span (Sukhbaatar et al. 2019, section 3; summed over layers by the model)."""
        if self.dynamic:
            if self.last_spans is None:
                return self.gate.bias.new_zeros(())
            return self.l1 * self.last_spans.mean()
        return self.l1 * self.spans().mean()

    @torch.no_grad()
    def after_step(self) -> None:
        """Keep z in [0, S] (the paper clamps after every update)."""
        if not self.dynamic:
            self.span_frac.clamp_(0.0, 1.0)


class SoftPatternKernel:
    """Wraps any kernel so a soft pattern (``soften``) can trim keys and add its
    score bias first; the inner kernel then applies the pattern's hard support."""
    citation = "Sukhbaatar et al. 2019, section 3: the soft mask enters as log m_z added to the scores"

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, pattern, q_offset: int = 0,
                 key_padding: Tensor | None = None, bias: Tensor | None = None,
                 need_weights: bool = False, **kw) -> tuple[Tensor, Tensor | None]:
        m = k.shape[-2]
        k, v, q_offset, key_padding, bias = pattern.soften(q, k, v, q_offset=q_offset,
                                                           key_padding=key_padding, bias=bias)
        out, weights = self.inner(q, k, v, pattern=pattern, q_offset=q_offset, key_padding=key_padding,
                                  bias=bias, need_weights=need_weights, **kw)
        if weights is not None and weights.shape[-1] < m:
            # Trimmed keys had zero weight; give the caller the full (n, m) matrix.
            weights = torch.nn.functional.pad(weights, (m - weights.shape[-1], 0))
        return out, weights


# A learned pattern: the builder supplies the head shape, the spec the keyword parameters.
PATTERNS.register("adaptive_span", AdaptiveSpan, needs=("n_heads", "d_head"))
