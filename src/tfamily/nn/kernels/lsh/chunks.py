"""Sorted-chunk LSH attention over a whole sequence (Kitaev et al. 2020, section 2).

Each round cuts its sorted order into chunks of ``c`` slots; a chunk's queries score the keys
of their own chunk and the one before (2c keys), which holds every query's window (layout.py),
and the window, the pattern, key padding and the self rule then mask the scores. Rounds are
combined by their log-sum-exp weights, and a round skips the keys an earlier round's window
already holds (appendix A: each key counts once), so the result is one softmax over every
key a query saw in any round, each counted once.

The memory-efficient path is a custom autograd function that keeps only q, k, v, the layout,
the output and its log-sum-exp, and recomputes the chunk scores in the backward pass (as flash
attention does), a group of (batch, head) rows at a time, so peak memory stays O(L) at any
number of rounds. When every round's chunk probabilities together fit in ``KEEP_PROBS`` floats
it keeps them instead (``keeps_probs``: the one place that chooses), which saves the backward
one score product and the masks; both give the same gradients (tested). ``attend_plain`` is the same computation under ordinary autograd, with an
optional additive score bias (relative positions: an L x L tensor already).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ...patterns import Pattern
from .layout import SLICE_SCORES, Layout, first_sighting

# Score elements (all rounds, all rows) up to which the forward keeps the chunk probabilities
# for the backward instead of recomputing them: the same 32 MiB bound as one slice of work.
KEEP_PROBS = SLICE_SCORES


@dataclass
class ChunkConfig:
    pattern: Pattern
    scale: float
    dropout_p: float
    length: int            # real sequence length (bias is indexed only there)
    seed: int = 0          # dropout masks of the memory-efficient path are replayed from it


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax and accumulation dtype: fp32 for half types, else the input's."""
    return torch.promote_types(dtype, torch.float32)


def alone(lse: Tensor, self_ok: Tensor) -> Tensor:
    """Kitaev et al. 2020, section 2: a position attends to itself only when no other key is
    available in any round; then its output is its own value (weight 1)."""
    return (lse <= torch.finfo(lse.dtype).min / 2) & self_ok


def self_allowed(pattern: Pattern, valid: Tensor, n_heads: int, q_pos: Tensor) -> Tensor:
    """``(b, h, n)`` bool: may the positions ``q_pos`` (n,) attend to themselves (pattern, padding)?"""
    b = valid.shape[0]
    bi = torch.arange(b, device=valid.device).view(b, 1, 1)
    hi = torch.arange(n_heads, device=valid.device).view(1, n_heads, 1)
    pos = q_pos.view(1, 1, -1)
    return (pattern.mask_mod(bi, hi, pos, pos) & valid[:, None, q_pos]).expand(b, n_heads, q_pos.numel())


def _groups(b: int, h: int, lp: int, chunk_len: int) -> list[tuple[int, int]]:
    """Ranges of flattened (batch, head) rows processed together: as many as keep one
    score tensor under SLICE_SCORES elements (at least one row)."""
    step = max(1, SLICE_SCORES // (lp * chunk_len * 2))
    return [(g, min(g + step, b * h)) for g in range(0, b * h, step)]


def keeps_probs(lay: Layout, n_rows: int) -> bool:
    """Does the memory-efficient forward keep every round's chunk probabilities (``n_rows``
    flattened (batch, head) rows, each round ``Lp x 2c`` scores) for the backward?"""
    return lay.n_rounds * n_rows * lay.padded_len * 2 * lay.chunk_len <= KEEP_PROBS


class Group:
    """Rows [g0, g1) of the flattened (batch, head) axis in round ``r``: the sort, its inverse,
    and what masks their chunks' scores."""

    def __init__(self, lay: Layout, r: int, n_heads: int, g0: int, g1: int):
        b, _, n_rounds, lp = lay.perm.shape
        c = lay.chunk_len
        self.n, self.c, self.nc = g1 - g0, c, lp // c
        flat = lambda t: t.reshape(b * n_heads, n_rounds, lp)[g0:g1]  # noqa: E731
        perm = flat(lay.perm)[:, r]                                          # (G, Lp) positions
        offs = (torch.arange(self.n, device=perm.device) * lp)[:, None]
        self.gather = (perm + offs).reshape(-1)                              # sorted <- original
        self.scatter = (flat(lay.slot)[:, r].long() + offs).reshape(-1)      # original <- sorted
        rows = torch.arange(g0, g1, device=perm.device)
        self.bi, self.hi = (rows // n_heads).view(-1, 1, 1, 1), (rows % n_heads).view(-1, 1, 1, 1)
        self.qpos = perm.view(self.n, self.nc, c)
        self.kpos = self.window(self.qpos)
        self.kval = self.window(lay.valid[rows // n_heads].gather(1, perm).view(self.n, self.nc, c))
        self.all_valid = bool(self.kval.all())
        # Windows of the queries and slots of the window's keys in rounds <= r: (r+1, G, C, c | 2c).
        at = lambda t, pos: t[:, : r + 1].gather(2, pos.reshape(self.n, 1, -1).expand(-1, r + 1, -1)) \
            .view(self.n, r + 1, self.nc, -1).transpose(0, 1)  # noqa: E731
        # The window tests are elementwise passes over every score: int16 halves their memory
        # traffic wherever 2 * slot fits (Lp <= 16384).
        small = torch.int16 if 2 * (lp - 1) <= torch.iinfo(torch.int16).max else torch.int32
        self.kslots = at(flat(lay.slot), self.kpos).to(small)
        self.los, self.his = at(flat(lay.lo), self.qpos).to(small), at(flat(lay.hi), self.qpos).to(small)
        self.r = r

    def sort(self, x: Tensor) -> Tensor:
        """Rows of the group in original order (G*Lp, ...) -> sorted chunks (G, C, c, ...)."""
        return x.index_select(0, self.gather).view(self.n, self.nc, self.c, *x.shape[1:])

    def unsort(self, x: Tensor) -> Tensor:
        return x.reshape(self.n * self.nc * self.c, *x.shape[3:]).index_select(0, self.scatter)

    @property
    def own(self) -> int:
        """Where a chunk's own rows start in its window (after the previous chunk's)."""
        return 0 if self.nc == 1 else self.c

    def window(self, x: Tensor) -> Tensor:
        """Sorted chunks (G, C, c, ...) -> windows (G, C, 2c, ...): the previous chunk's rows
        then its own (the first chunk's "previous" is the last; no window reaches it, see
        layout.py)."""
        return x if self.nc == 1 else torch.cat([x.roll(1, dims=1), x], dim=2)

    def sort_window(self, x: Tensor) -> Tensor:
        """Rows of the group in original order (G*Lp, e) -> their sorted windows (G, C, 2c, e)
        as a strided view, no copy per window: one buffer holds ``c`` spare (zero) rows and
        then every sorted chunk, so chunk j's window is buffer rows [jc, jc + 2c). Only the
        first chunk of each row sees other rows there (the spare ones, or the last chunk of
        the row before): no window reaches those slots, so they are masked as in ``window``."""
        if self.nc == 1:
            return self.sort(x)
        e = x.shape[1]
        buf = x.new_empty(self.c + self.gather.numel(), e)
        buf[: self.c].zero_()
        torch.index_select(x, 0, self.gather, out=buf[self.c:])
        return buf.as_strided((self.n, self.nc, 2 * self.c, e), (self.nc * self.c * e, self.c * e, e, 1))

    def fold(self, dw: Tensor) -> Tensor:
        """Gradient over windows (G, C, 2c, ...) -> per sorted chunk (G, C, c, ...): chunk j's
        own part plus chunk j+1's "previous" part. Across the flattened (row, chunk) axis, as
        ``sort_window`` lays them out; the parts that land on another row are exact zeros
        (masked entries)."""
        if self.nc == 1:
            return dw
        out = dw[:, :, self.c:].contiguous()
        flat = out.view(self.n * self.nc, self.c, *dw.shape[3:])
        flat[:-1] += dw[:, :, : self.c].reshape(self.n * self.nc, self.c, *dw.shape[3:])[1:]
        return out

    def mask(self, pattern: Pattern) -> Tensor:
        """``(G, C, c, 2c)`` allowed entries: in this round's window and no earlier round's,
        the pattern, key padding, and not self (each position occurs once per round, on its
        own chunk's diagonal)."""
        # This round's window test: window entry w of chunk j holds slot jc - own + w, so "slot
        # in [lo, hi]" is two comparisons of w with per-query bounds (the first chunk's
        # "previous" entries count as slots < 0: outside every window, as in ``window``).
        start = (torch.arange(self.nc, device=self.qpos.device) * self.c - self.own).view(1, -1, 1)
        w = torch.arange(self.kpos.shape[-1], device=self.qpos.device)
        lo, hi = (self.los[self.r] - start)[..., None], (self.his[self.r] - start)[..., None]
        allowed = first_sighting(self.kslots, self.los, self.his, self.r, current=(w >= lo) & (w <= hi))
        allowed &= pattern.mask_mod(self.bi, self.hi, self.qpos[..., :, None], self.kpos[..., None, :])
        if not self.all_valid:
            allowed &= self.kval[..., None, :]
        allowed[..., :, self.own: self.own + self.c].diagonal(dim1=-2, dim2=-1).fill_(False)
        return allowed

    def probs(self, qs: Tensor, kw: Tensor, pattern: Pattern, lse: Tensor | None):
        """Scores -> probabilities. Without ``lse`` (forward) they are normalised per round and
        the round's log-sum-exp is returned; with it (backward) P = exp(S - LSE), LSE taken
        over all rounds."""
        acc = acc_dtype(qs.dtype)
        s = torch.matmul(qs, kw.transpose(-1, -2)).to(acc)
        # The mask as 0/1 floats: multiplying, adding and selecting with a bool tensor take
        # CPU slow paths (measured 5-10x a float multiply); the conversion is one cheap pass.
        keep = self.mask(pattern).to(acc)
        if lse is None:
            # Masked row max: masked scores sit _FAR below any allowed one (scores are << _FAR).
            m = s.add(keep - 1.0, alpha=_FAR).amax(-1, keepdim=True)
            live = m > -_FAR / 2  # rows with some allowed key; the others output exactly zero
            p = _exp(s.sub_(torch.where(live, m, 0.0))).mul_(keep)
            total = p.sum(-1, keepdim=True)
            p = p.div_(total.clamp_min(torch.finfo(acc).tiny))
            lse_r = torch.where(live, m + total.log(), torch.finfo(acc).min)
            return p, lse_r.squeeze(-1)
        live = (lse > torch.finfo(acc).min / 2)[..., None]
        return _exp(s.sub_(torch.where(live, lse[..., None], torch.inf))).mul_(keep), None


_FAR = 1e30


def _exp(x: Tensor) -> Tensor:
    """In-place exp of log-probabilities (<= 0). Below -80 the result is < 2e-35 of the row's
    largest term, far under fp32 resolution; clamping there keeps CPU exp off its slow
    underflow and denormal paths (3-15x slower per element), masked entries are zeroed after."""
    return x.clamp_min_(-80.0).exp_()


def _dropout_mask(shape, p: float, gen: torch.Generator, device) -> Tensor:
    return torch.empty(shape, device=device).bernoulli_(1.0 - p, generator=gen).div_(1.0 - p)


def _rounds(lay: Layout, n_heads: int, cfg: ChunkConfig, device, groups: list[Group] | None = None):
    """(round generator, row range, group) in a fixed order: forward and backward draw the
    same dropout masks from the same seeds. ``groups``: the forward's, in that order."""
    b, lp = lay.valid.shape[0], lay.padded_len
    made = iter(groups) if groups is not None else None
    for r in range(lay.n_rounds):
        gen = torch.Generator(device).manual_seed(cfg.seed + r) if cfg.dropout_p > 0 else None
        for g0, g1 in _groups(b, n_heads, lp, lay.chunk_len):
            grp = next(made) if made is not None else Group(lay, r, n_heads, g0, g1)
            yield gen, g0 * lp, g1 * lp, grp


class LSHFunction(torch.autograd.Function):
    """Sorted-chunk attention over all rounds. Forward keeps the output O and the
    log-sum-exp LSE over every (round, key) entry; backward recomputes each chunk's
    probabilities P = exp(S - LSE) (or, when ``keeps_probs``, rescales the forward's per-round
    ones: P = p_r exp(LSE_r - LSE)) and applies dS = P (dP - rowsum(dO * O))."""

    @staticmethod
    def forward(ctx, q, k, v, lay, cfg):
        b, h, lp, e = q.shape
        acc = acc_dtype(q.dtype)
        qf, kf, vf = q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, e)
        out = torch.zeros(b * h * lp, e, dtype=acc, device=q.device)
        lse = torch.full((b * h * lp,), torch.finfo(acc).min, dtype=acc, device=q.device)
        kept = [] if keeps_probs(lay, b * h) else None
        for gen, r0, r1, grp in _rounds(lay, h, cfg, q.device):
            qs = grp.sort(qf[r0:r1]).mul_(cfg.scale)  # the sort copies, so scaling here is free
            p, lse_r = grp.probs(qs, grp.sort_window(kf[r0:r1]), cfg.pattern, None)
            if kept is not None:
                kept.append((grp, p, lse_r))
            pz = p
            if gen is not None:
                z = _dropout_mask(p.shape, cfg.dropout_p, gen, q.device)
                pz = p * z if kept is not None else p.mul_(z)
            o_r = grp.unsort(torch.matmul(pz.to(v.dtype), grp.sort_window(vf[r0:r1])).to(acc))
            lse_r = grp.unsort(lse_r[..., None]).squeeze(-1)
            if grp.r == 0:  # merging into the empty state (lse = finfo.min) gives exactly this
                out[r0:r1], lse[r0:r1] = o_r, lse_r
                continue
            # Online merge of this round into (out, lse), as flash attention merges blocks.
            old = lse[r0:r1]
            new = torch.logaddexp(old, lse_r)
            out[r0:r1] = out[r0:r1] * torch.exp(old - new)[:, None] + o_r * torch.exp(lse_r - new)[:, None]
            lse[r0:r1] = new
        only = alone(lse, self_allowed(cfg.pattern, lay.valid, h, torch.arange(lp, device=q.device)).reshape(-1))
        out[only] = vf[only].to(acc)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.lay, ctx.cfg, ctx.kept = lay, cfg, kept
        return out.view(b, h, lp, e).to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        lay, cfg = ctx.lay, ctx.cfg
        b, h, lp, e = q.shape
        acc = acc_dtype(q.dtype)
        qf, kf, vf = q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, e)
        do = dout.reshape(-1, e).to(acc)
        delta = (do * out).sum(-1)  # rowsum(dO * O): the softmax Jacobian's diagonal term
        dq, dk, dv = (torch.zeros(b * h * lp, e, dtype=acc, device=q.device) for _ in range(3))
        kept = ctx.kept
        groups = None if kept is None else [grp for grp, _, _ in kept]
        for i, (gen, r0, r1, grp) in enumerate(_rounds(lay, h, cfg, q.device, groups)):
            qs = grp.sort(qf[r0:r1]).mul_(cfg.scale)
            kw, vw = grp.sort_window(kf[r0:r1]), grp.sort_window(vf[r0:r1])
            lse_s = grp.sort(lse[r0:r1, None]).squeeze(-1)
            if kept is None:
                p, _ = grp.probs(qs, kw, cfg.pattern, lse_s)
            else:
                # One round: LSE = LSE_r wherever a key is allowed (elsewhere p_r = 0), so no rescale.
                _, p, lse_r = kept[i]
                p = p * torch.exp(lse_r - lse_s)[..., None] if lay.n_rounds > 1 else p
            dos = grp.sort(do[r0:r1])
            dp = torch.matmul(dos.to(v.dtype), vw.transpose(-1, -2)).to(acc)
            pz = p
            if gen is not None:
                z = _dropout_mask(p.shape, cfg.dropout_p, gen, q.device)
                pz, dp = p * z, dp.mul_(z)
            dv[r0:r1] += grp.unsort(grp.fold(torch.matmul(pz.transpose(-1, -2), dos)))
            ds = dp.sub_(grp.sort(delta[r0:r1, None])).mul_(p)
            dq[r0:r1] += grp.unsort(torch.matmul(ds, kw.to(acc)))
            dk[r0:r1] += grp.unsort(grp.fold(torch.matmul(ds.transpose(-1, -2), qs.to(acc))))
        only = alone(lse, self_allowed(cfg.pattern, lay.valid, h, torch.arange(lp, device=q.device)).reshape(-1))
        dv[only] += do[only]
        shape = (b, h, lp, e)
        return (dq.mul_(cfg.scale).view(shape).to(q.dtype), dk.view(shape).to(k.dtype),
                dv.view(shape).to(v.dtype), None, None)


def attend_plain(q: Tensor, k: Tensor, v: Tensor, lay: Layout, cfg: ChunkConfig,
                 bias: Tensor | None) -> Tensor:
    """The chunked computation under ordinary autograd, all (batch, head) rows of a round at
    once; ``bias`` ``(b|1, h|1, L, L)`` is added at each pair's original positions."""
    b, h, lp, e = q.shape
    acc = acc_dtype(q.dtype)
    neg = torch.finfo(acc).min
    qf, kf, vf = q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, e)
    outs, lses = [], []
    for r in range(lay.n_rounds):
        grp = Group(lay, r, h, 0, b * h)
        s = torch.matmul(grp.sort(qf), grp.window(grp.sort(kf)).transpose(-1, -2)).to(acc) * cfg.scale
        if bias is not None:
            s = s + _gather_bias(bias, grp, b, h, cfg.length).to(acc)
        allowed = grp.mask(cfg.pattern)
        # A finite fill: a row with nothing allowed gets a huge negative log-sum-exp, so it
        # weighs nothing against other rounds and its output is exactly zero.
        s = s.masked_fill(~allowed, neg)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]) * allowed
        if cfg.dropout_p > 0:
            p = F.dropout(p, cfg.dropout_p)
        outs.append(grp.unsort(torch.matmul(p.to(v.dtype), grp.window(grp.sort(vf)))).view(b, h, lp, e))
        lses.append(grp.unsort(lse[..., None]).view(b, h, lp))
    lses = torch.stack(lses, dim=2)
    w = torch.softmax(lses, dim=2)  # Kitaev et al. 2020: rounds weighed by exp(lse)
    out = (torch.stack(outs, dim=2) * w[..., None].to(q.dtype)).sum(2).to(q.dtype)
    only = alone(lses.amax(2), self_allowed(cfg.pattern, lay.valid, h, torch.arange(lp, device=q.device)))
    return torch.where(only[..., None], v, out)


def _gather_bias(bias: Tensor, grp: Group, b: int, h: int, n: int) -> Tensor:
    """The additive bias at the (query, key) pairs of each chunk; pad slots read position
    n - 1 (they are masked anyway)."""
    full = bias.expand(b, h, bias.shape[-2], bias.shape[-1]).reshape(b * h, *bias.shape[-2:])
    rows = torch.arange(b * h, device=bias.device).view(-1, 1, 1, 1)
    return full[rows, grp.qpos.clamp(max=n - 1)[..., :, None], grp.kpos.clamp(max=n - 1)[..., None, :]]
