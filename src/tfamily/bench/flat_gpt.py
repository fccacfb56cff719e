"""What ``tfamily.build(tfamily.members.gpt(...))`` computes, written out on one page,
twice: ``ReferenceGPT`` in the plainest math (the test reference) and ``FlatGPT``, the
same model as a minimal single-file GPT would write it for speed (one fused QKV matmul,
SDPA with ``is_causal``; nanoGPT style), the in-house peer of ``tfamily bench peers``.

A flat decoder-only Transformer with plain torch ops and no parts passed in: token
embedding times sqrt(d) (Vaswani et al. 2017, section 3.4) plus a learned position
table; N pre-norm blocks x = x + Attn(LN(x)), x = x + MLP(LN(x)) (GPT-2, Radford et al.
2019, section 2.3); a final LayerNorm; logits against the tied embedding read at
s h with a learned scalar s starting at 1 / sqrt(d) (T5's output rescaling, see
nn/embedding.py). Attention is softmax(q k^T /
sqrt(e) + causal mask) v with grouped-query heads (Ainslie et al. 2023): query head i
reads key/value head i // (n_heads / n_kv_heads). Dropout is left out: compare with
``dropout=0``. ``copy_from(model)`` takes the composed model's weights, so the two can be
compared in outputs and gradients (tests/bench/test_flat_gpt.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ReferenceBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, d_ff: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.wq = nn.Linear(d_model, n_heads * d_head)
        self.wk = nn.Linear(d_model, n_kv_heads * d_head)
        self.wv = nn.Linear(d_model, n_kv_heads * d_head)
        self.wo = nn.Linear(n_heads * d_head, d_model)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def attention(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.d_head).transpose(1, 2)     # (b, h, n, e)
        k = self.wk(x).view(b, n, self.n_kv_heads, self.d_head).transpose(1, 2)  # (b, h_kv, n, e)
        v = self.wv(x).view(b, n, self.n_kv_heads, self.d_head).transpose(1, 2)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)                # (b, h, n, n)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        out = scores.softmax(-1) @ v                                             # (b, h, n, e)
        return self.wo(out.transpose(1, 2).reshape(b, n, self.n_heads * self.d_head))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ReferenceGPT(nn.Module):
    block = ReferenceBlock

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                 max_len: int, d_ff: int | None = None, d_head: int | None = None):
        super().__init__()
        self.d_model = d_model
        self.wte = nn.Parameter(torch.randn(vocab_size, d_model) * d_model ** -0.5)
        self.wpe = nn.Parameter(torch.randn(max_len, d_model))
        d_head = d_head or d_model // n_heads
        self.blocks = nn.ModuleList(self.block(d_model, n_heads, n_kv_heads, d_head, d_ff or 4 * d_model)
                                    for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.logit_scale = nn.Parameter(torch.tensor(d_model ** -0.5))

    def embed(self, tokens: Tensor) -> Tensor:
        return self.wte[tokens]

    def forward(self, tokens: Tensor) -> Tensor:
        """``tokens``: (b, n) -> logits (b, n, vocab)."""
        n = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.d_model) + self.wpe[:n]
        for block in self.blocks:
            x = block(x)
        return (self.ln_f(x) * self.logit_scale) @ self.wte.t()

    @torch.no_grad()
    def copy_from(self, model: nn.Module) -> "ReferenceGPT":
        """Take the weights of ``tfamily.build(members.gpt(...))`` (same shape)."""
        self.wte.copy_(model.embed.weight)
        self.wpe.copy_(model.position.table.weight)
        for ref, blk in zip(self.blocks, model.stack.blocks, strict=True):
            qkv = blk.attn.proj.qkv_proj
            split = [ref.wq.out_features, ref.wk.out_features, ref.wv.out_features]
            wq, wk, wv = qkv.weight.split(split)
            bq, bk, bv = qkv.bias.split(split)
            pairs = [(ref.wq.weight, wq), (ref.wq.bias, bq),
                     (ref.wk.weight, wk), (ref.wk.bias, bk), (ref.wv.weight, wv), (ref.wv.bias, bv),
                     (ref.wo.weight, blk.attn.out_proj.weight), (ref.wo.bias, blk.attn.out_proj.bias),
                     (ref.ln1.weight, blk.attn_residual.norm.weight), (ref.ln1.bias, blk.attn_residual.norm.bias),
                     (ref.ln2.weight, blk.ff_residual.norm.weight), (ref.ln2.bias, blk.ff_residual.norm.bias),
                     (ref.fc1.weight, blk.ff.net[0].weight), (ref.fc1.bias, blk.ff.net[0].bias),
                     (ref.fc2.weight, blk.ff.net[3].weight), (ref.fc2.bias, blk.ff.net[3].bias)]
            for dst, src in pairs:
                dst.copy_(src)
        self.ln_f.weight.copy_(model.stack.final_norm.weight)
        self.ln_f.bias.copy_(model.stack.final_norm.bias)
        self.logit_scale.copy_(model.head.logit_scale)
        return self


def gradients_of(model: nn.Module) -> dict[str, Tensor]:
    """The reference's gradients keyed like ``copy_from``'s sources, for comparing with
    the composed model: name -> gradient in the composed model's layout."""
    out = {"embed.weight": model.wte.grad, "position.table.weight": model.wpe.grad,
           "stack.final_norm.weight": model.ln_f.weight.grad, "stack.final_norm.bias": model.ln_f.bias.grad,
           "head.logit_scale": model.logit_scale.grad}
    for i, ref in enumerate(model.blocks):
        p = f"stack.blocks.{i}."
        out.update({
            p + "attn.proj.qkv_proj.weight": torch.cat([ref.wq.weight.grad, ref.wk.weight.grad, ref.wv.weight.grad]),
            p + "attn.proj.qkv_proj.bias": torch.cat([ref.wq.bias.grad, ref.wk.bias.grad, ref.wv.bias.grad]),
            p + "attn.out_proj.weight": ref.wo.weight.grad, p + "attn.out_proj.bias": ref.wo.bias.grad,
            p + "attn_residual.norm.weight": ref.ln1.weight.grad, p + "attn_residual.norm.bias": ref.ln1.bias.grad,
            p + "ff_residual.norm.weight": ref.ln2.weight.grad, p + "ff_residual.norm.bias": ref.ln2.bias.grad,
            p + "ff.net.0.weight": ref.fc1.weight.grad, p + "ff.net.0.bias": ref.fc1.bias.grad,
            p + "ff.net.3.weight": ref.fc2.weight.grad, p + "ff.net.3.bias": ref.fc2.bias.grad})
    return out


class FlatBlock(nn.Module):
    """``ReferenceBlock`` with q, k, v from one matmul and SDPA's fused causal kernel."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, d_ff: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.wqkv = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * d_head)
        self.wo = nn.Linear(n_heads * d_head, d_model)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def attention(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        qkv = self.wqkv(x).view(b, n, self.n_heads + 2 * self.n_kv_heads, self.d_head).transpose(1, 2)
        q, k, v = qkv.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=1)   # (b, h, n, e)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.wo(out.transpose(1, 2).reshape(b, n, self.n_heads * self.d_head))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class FlatGPT(ReferenceGPT):
    """``ReferenceGPT`` with ``FlatBlock``s: same parameters, the QKV weights stacked."""

    block = FlatBlock

    def embed(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.wte)

    @torch.no_grad()
    def copy_from(self, ref: ReferenceGPT) -> "FlatGPT":
        """Take the weights of a ``ReferenceGPT`` of the same shape."""
        for name in ("wte", "wpe", "logit_scale"):
            getattr(self, name).copy_(getattr(ref, name))
        self.ln_f.load_state_dict(ref.ln_f.state_dict())
        for flat, blk in zip(self.blocks, ref.blocks, strict=True):
            for name in ("ln1", "ln2", "wo", "fc1", "fc2"):
                getattr(flat, name).load_state_dict(getattr(blk, name).state_dict())
            flat.wqkv.weight.copy_(torch.cat([blk.wq.weight, blk.wk.weight, blk.wv.weight]))
            flat.wqkv.bias.copy_(torch.cat([blk.wq.bias, blk.wk.bias, blk.wv.bias]))
        return self
