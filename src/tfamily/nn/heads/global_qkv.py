"""Longformer's global tokens with their own projections (Beltagy et al. 2020, section 3.1).

"We use two sets of projections, Q_s, K_s, V_s to compute attention scores of sliding window
attention, and Q_g, K_g, V_g to compute attention scores for the global attention." Which tokens
are global is an input of each example (a question's tokens, [CLS]), ``global_tokens`` (b, n) bool,
so the pattern depends on the data:
- a query that is not global sees its window (the wrapped attention's pattern) and every global
  key, through the sliding-window projections;
- a global query sees every key, through the global projections Q_g, K_g, V_g.
Both outputs go through the one output projection, as in the released code. Without global
tokens the wrapped attention runs alone, at its pattern's cost. With them, the g global keys of the
row with most are copied in front of the sequence and seen by every query, the originals masked:
the window plus g columns, on the wrapped kernel's path (sparse for ``blocksparse``), and the g
global queries against all n keys; nothing is n x n.
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from ..attention import Attention
from ..patterns import Full, GlobalTokens, Union
from .projection import QKVProjection


class GlobalTokenAttention(nn.Module):
    """``local``: the sliding-window attention (its projection is Q_s, K_s, V_s); ``global_proj``:
    Q_g, K_g, V_g. Encoder self-attention only: no cache, memory or cross-attention."""

    def __init__(self, local: Attention, global_proj: QKVProjection):
        super().__init__()
        self.local, self.global_proj = local, global_proj

    @property
    def pattern(self):
        return self.local.pattern

    def forward(self, x: Tensor, *, global_tokens: Tensor | None = None, key_padding: Tensor | None = None,
                **kw) -> Tensor:
        """``x``: (b, n, d); ``global_tokens``: (b, n) bool, True for a global token; ``key_padding``:
        (b, n) bool, True for a real token (a padding token is never global)."""
        if global_tokens is None or not bool(global_tokens.any()):
            return self.local(x, key_padding=key_padding, **kw)
        if any(v is not None for v in kw.values()):
            raise ValueError(f"global tokens take encoder self-attention only, got {sorted(kw)}; "
                             f"drop the cache, memory or context")
        b, n, _ = x.shape
        if global_tokens.dtype != torch.bool or tuple(global_tokens.shape) != (b, n):
            raise ValueError(f"global_tokens must be a (batch, tokens) = {(b, n)} bool tensor, got "
                             f"{tuple(global_tokens.shape)} {global_tokens.dtype}")
        real = key_padding if key_padding is not None else torch.ones(b, n, dtype=torch.bool, device=x.device)
        glob = global_tokens & real
        loc = self.local
        count = glob.sum(-1)
        order = torch.sort(glob.long(), dim=-1, descending=True, stable=True).indices[:, : int(count.max())]
        used = torch.arange(order.shape[1], device=x.device)[None] < count[:, None]   # padded slots: not global
        q, k, v = loc.proj.qkv(x, x)
        drop = loc.dropout if self.training else 0.0
        # Every query sees the global keys: copies of them go first (positions 0..g-1, seen by all), the
        # sequence follows at offset g with its global keys masked, so none is counted twice and the
        # window (translation-invariant) runs on the kernel's sparse path. Nothing is n x n.
        g = order.shape[1]
        k, v = (torch.cat([t.gather(2, order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1])), t], 2)
                for t in (k, v))
        pattern = Union(loc.pattern, GlobalTokens(g, causal=False), name="window_and_global_keys")
        out, _ = loc.kernel(q, k, v, pattern=pattern, q_offset=g, key_padding=torch.cat([used, real & ~glob], 1),
                            dropout_p=drop, scale=loc.scale)
        out = rearrange(out, "b h n e -> b n (h e)")
        # Global queries: gathered (padded to the row with most), attend to all real keys via Q_g, K_g, V_g.
        qg = self.global_proj.q(x.gather(1, order[..., None].expand(-1, -1, x.shape[-1])))
        kg, vg = self.global_proj.kv(x)
        gout, _ = loc.kernel(qg, kg, vg, pattern=Full(), key_padding=real, dropout_p=drop, scale=loc.scale)
        gout = rearrange(gout, "b h g e -> b g (h e)")
        rows = torch.arange(b, device=x.device)[:, None].expand_as(order)
        out = out.index_put((rows[used], order[used]), gout[used])
        return loc.out_proj(out)
