"""What ``tfamily.build(tfamily.members.gpt(...))`` computes, written out on one page,
twice: ``ReferenceGPT`` in the plainest math (the test reference) and ``FlatGPT``, the
same model as a minimal single-file GPT would write it for speed (one fused QKV matmul,
SDPA with ``is_causal``; nanoGPT style), the in-house peer of ``tfamily bench peers`` and
``tfamily bench recipe``.

A flat decoder-only Transformer with plain torch ops and no parts passed in, written to
nanoGPT's definition of GPT-2 (Radford et al. 2019, section 2.3): a token table and a
learned position table, both N(0, 0.02), added unscaled; dropout on that sum; N pre-norm
blocks x = x + drop(Attn(LN(x))), x = x + drop(MLP(LN(x))) with dropout also on the
attention probabilities and none on the MLP's hidden activations; a final LayerNorm; logits
against the tied token table. Every linear weight N(0, 0.02), the two projections that
write into the stream (attention output, MLP output) N(0, 0.02 / sqrt(2 L)), biases zero.
``bias`` (GPT-2: True; nanoGPT's Shakespeare recipe: False, LayerNorms included) and
``approximate`` ("tanh": GPT-2's GELU; "none": nanoGPT's exact one) are the two choices
the recipes differ on. Attention is softmax(q k^T / sqrt(e) + causal mask) v with
grouped-query heads (Ainslie et al. 2023): query head i reads key/value head
i // (n_heads / n_kv_heads). ``copy_from(model)`` takes the composed model's weights, so
the two can be compared in outputs, gradients and training (tests/bench/test_flat_gpt.py,
tests/bench/test_recipe.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

STD = 0.02  # GPT-2's initializer_range


class ReferenceBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_head: int, d_ff: int,
                 bias: bool = True, approximate: str = "tanh", dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_head
        self.approximate, self.dropout = approximate, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d_model, bias=bias), nn.LayerNorm(d_model, bias=bias)
        # here, between the norms and wo: the order of creation is the order of the random draws
        self.add_qkv(d_model, bias)
        self.wo = nn.Linear(n_heads * d_head, d_model, bias=bias)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff, bias=bias), nn.Linear(d_ff, d_model, bias=bias)

    def add_qkv(self, d_model: int, bias: bool) -> None:
        """The q, k and v projections: three maps."""
        self.wq = nn.Linear(d_model, self.n_heads * self.d_head, bias=bias)
        self.wk = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)
        self.wv = nn.Linear(d_model, self.n_kv_heads * self.d_head, bias=bias)

    def drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training)

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
        out = self.drop(scores.softmax(-1)) @ v                                  # (b, h, n, e)
        return self.wo(out.transpose(1, 2).reshape(b, n, self.n_heads * self.d_head))

    def mlp(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))

    def residual_projections(self) -> tuple[nn.Linear, ...]:
        return self.wo, self.fc2


class ReferenceGPT(nn.Module):
    block = ReferenceBlock

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                 max_len: int, d_ff: int | None = None, d_head: int | None = None, *, bias: bool = True,
                 approximate: str = "tanh", dropout: float = 0.0):
        super().__init__()
        self.d_model, self.dropout = d_model, dropout
        self.wte = nn.Parameter(torch.empty(vocab_size, d_model))
        self.wpe = nn.Parameter(torch.empty(max_len, d_model))
        d_head = d_head or d_model // n_heads
        self.blocks = nn.ModuleList(self.block(d_model, n_heads, n_kv_heads, d_head, d_ff or 4 * d_model,
                                               bias, approximate, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, bias=bias)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nanoGPT's ``_init_weights`` plus its ``c_proj`` rescaling."""
        nn.init.normal_(self.wte, std=STD)
        nn.init.normal_(self.wpe, std=STD)
        residual = {id(m) for blk in self.blocks for m in blk.residual_projections()}
        for m in self.modules():
            if isinstance(m, nn.Linear):
                std = STD / math.sqrt(2 * len(self.blocks)) if id(m) in residual else STD
                nn.init.normal_(m.weight, std=std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def embed(self, tokens: Tensor) -> Tensor:
        return self.wte[tokens]

    def forward(self, tokens: Tensor) -> Tensor:
        """``tokens``: (b, n) -> logits (b, n, vocab)."""
        n = tokens.shape[1]
        x = F.dropout(self.embed(tokens) + self.wpe[:n], self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.t()

    @torch.no_grad()
    def copy_from(self, model: nn.Module) -> "ReferenceGPT":
        """Take the weights of ``tfamily.build(members.gpt(...))`` (same shape and bias choice)."""
        self.wte.copy_(model.embed.weight)
        self.wpe.copy_(model.position.table.weight)
        for ref, blk in zip(self.blocks, model.stack.blocks, strict=True):
            qkv = blk.attn.proj.qkv_proj
            split = [ref.wq.out_features, ref.wk.out_features, ref.wv.out_features]
            pairs = [(ref.wq.weight, qkv.weight.split(split)[0]), (ref.wk.weight, qkv.weight.split(split)[1]),
                     (ref.wv.weight, qkv.weight.split(split)[2]), (ref.wo.weight, blk.attn.out_proj.weight),
                     (ref.ln1.weight, blk.attn_residual.norm.weight), (ref.ln2.weight, blk.ff_residual.norm.weight),
                     (ref.fc1.weight, blk.ff.net[0].weight), (ref.fc2.weight, blk.ff.net[3].weight)]
            if qkv.bias is not None:
                bq, bk, bv = qkv.bias.split(split)
                pairs += [(ref.wq.bias, bq), (ref.wk.bias, bk), (ref.wv.bias, bv), (ref.wo.bias, blk.attn.out_proj.bias),
                          (ref.ln1.bias, blk.attn_residual.norm.bias), (ref.ln2.bias, blk.ff_residual.norm.bias),
                          (ref.fc1.bias, blk.ff.net[0].bias), (ref.fc2.bias, blk.ff.net[3].bias)]
            for dst, src in pairs:
                dst.copy_(src)
        self.ln_f.weight.copy_(model.stack.final_norm.weight)
        if self.ln_f.bias is not None:
            self.ln_f.bias.copy_(model.stack.final_norm.bias)
        return self

    def composed_names(self) -> dict[str, Tensor]:
        """Each parameter in the composed model's layout, keyed by its name there (the q, k, v
        rows stacked as ``qkv_proj``): ``fn(param)`` for every parameter, e.g. its gradient."""
        return self._keyed(lambda p: p)

    def _keyed(self, fn) -> dict[str, Tensor]:
        def cat(*ps):
            vals = [fn(p) for p in ps]
            return None if vals[0] is None else torch.cat(vals)
        out = {"embed.weight": fn(self.wte), "position.table.weight": fn(self.wpe),
               "stack.final_norm.weight": fn(self.ln_f.weight)}
        if self.ln_f.bias is not None:
            out["stack.final_norm.bias"] = fn(self.ln_f.bias)
        for i, ref in enumerate(self.blocks):
            p = f"stack.blocks.{i}."
            parts = {"attn.proj.qkv_proj.": (ref.wq, ref.wk, ref.wv), "attn.out_proj.": (ref.wo,),
                     "attn_residual.norm.": (ref.ln1,), "ff_residual.norm.": (ref.ln2,),
                     "ff.net.0.": (ref.fc1,), "ff.net.3.": (ref.fc2,)}
            for name, mods in parts.items():
                out[p + name + "weight"] = cat(*(m.weight for m in mods))
                if mods[0].bias is not None:
                    out[p + name + "bias"] = cat(*(m.bias for m in mods))
        return out


def gradients_of(model: ReferenceGPT) -> dict[str, Tensor]:
    """The reference's gradients keyed like ``copy_from``'s sources, for comparing with
    the composed model: name -> gradient in the composed model's layout."""
    return model._keyed(lambda p: p.grad)


class FlatBlock(ReferenceBlock):
    """``ReferenceBlock`` with q, k, v from one matmul and SDPA's fused causal kernel (its
    ``dropout_p`` drops the attention probabilities, as nanoGPT's does)."""

    def add_qkv(self, d_model: int, bias: bool) -> None:
        """The q, k and v projections stacked in one map."""
        self.wqkv = nn.Linear(d_model, (self.n_heads + 2 * self.n_kv_heads) * self.d_head, bias=bias)

    def attention(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        qkv = self.wqkv(x).view(b, n, self.n_heads + 2 * self.n_kv_heads, self.d_head).transpose(1, 2)
        q, k, v = qkv.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=1)   # (b, h, n, e)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_heads != self.n_kv_heads,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.wo(out.transpose(1, 2).reshape(b, n, self.n_heads * self.d_head))

    def forward(self, x: Tensor) -> Tensor:
        drop = self.dropout if self.training else 0.0
        x = x + F.dropout(self.attention(self.ln1(x)), drop)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.approximate)), drop)


class FlatGPT(ReferenceGPT):
    """``ReferenceGPT`` with ``FlatBlock``s: same parameters, the QKV weights stacked."""

    block = FlatBlock

    def embed(self, tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.wte)

    @torch.no_grad()
    def copy_from(self, ref: ReferenceGPT) -> "FlatGPT":
        """Take the weights of a ``ReferenceGPT`` of the same shape."""
        for name in ("wte", "wpe"):
            getattr(self, name).copy_(getattr(ref, name))
        self.ln_f.load_state_dict(ref.ln_f.state_dict())
        for flat, blk in zip(self.blocks, ref.blocks, strict=True):
            for name in ("ln1", "ln2", "wo", "fc1", "fc2"):
                getattr(flat, name).load_state_dict(getattr(blk, name).state_dict())
            flat.wqkv.weight.copy_(torch.cat([blk.wq.weight, blk.wk.weight, blk.wv.weight]))
            if flat.wqkv.bias is not None:
                flat.wqkv.bias.copy_(torch.cat([blk.wq.bias, blk.wk.bias, blk.wv.bias]))
        return self
