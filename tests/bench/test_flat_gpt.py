"""The flat reference GPT (tfamily/bench/flat_gpt.py) equals the composed member
``build(members.gpt(...))`` in logits and in every parameter's gradient, on fresh
random weights and tokens, across shapes, lengths and head layouts (MHA, GQA, MQA)."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.bench import flat_gpt as reference_gpt

CONFIGS = [  # (d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, seq_len)
    (32, 1, 4, 4, None, 11, 16, 16),      # MHA
    (48, 2, 6, 2, 96, 37, 24, 19),        # GQA, odd length shorter than the table
    (64, 3, 8, 1, None, 65, 40, 33),      # MQA
    (40, 2, 4, 2, 72, 23, 8, 1),          # a single token
]


def _pair(d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, seed):
    torch.manual_seed(seed)
    spec = members.gpt(d_model=d_model, dropout=0.0, vocab_size=vocab, depth__n_layers=n_layers,
                       heads=dict(n_heads=n_heads, n_kv_heads=n_kv_heads), ff__d_ff=d_ff,
                       position__max_len=max_len)
    model = tfamily.build(spec)
    # Fresh, non-default values everywhere (norm gains and biases too), so a mis-copied
    # or ignored parameter shows.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref = reference_gpt.ReferenceGPT(vocab, d_model, n_layers, n_heads, n_kv_heads, max_len, d_ff)
    return model, ref.copy_from(model)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"d{c[0]}-L{c[1]}-h{c[2]}-kv{c[3]}-n{c[7]}")
def test_reference_gpt_equals_the_composed_member_in_outputs_and_gradients(config, seed):
    d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, n = config
    model, ref = _pair(d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, seed)
    tokens = torch.randint(0, vocab, (3, n), generator=torch.Generator().manual_seed(100 + seed))
    target = torch.randint(0, vocab, (3, n), generator=torch.Generator().manual_seed(200 + seed))
    logits, ref_logits = model(tokens), ref(tokens)
    torch.testing.assert_close(logits, ref_logits, atol=2e-5, rtol=1e-4)
    loss, _ = model.loss({"x": tokens, "y": target})
    ref_loss = torch.nn.functional.cross_entropy(ref_logits.flatten(0, 1), target.flatten())
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    ref_loss.backward()
    grads = reference_gpt.gradients_of(ref)
    named = dict(model.named_parameters())
    assert set(grads) == set(named), set(grads) ^ set(named)
    for name, p in named.items():
        torch.testing.assert_close(p.grad, grads[name], atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_reference_gpt_sees_a_changed_weight():
    """The comparison is not vacuous: perturbing one copied weight changes the logits."""
    model, ref = _pair(32, 1, 4, 2, None, 11, 16, 0)
    tokens = torch.randint(0, 11, (2, 16))
    with torch.no_grad():
        ref.blocks[0].wv.bias[0] += 1.0
    assert not torch.allclose(model(tokens), ref(tokens), atol=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"d{c[0]}-L{c[1]}-h{c[2]}-kv{c[3]}-n{c[7]}")
def test_flat_gpt_equals_the_reference_in_outputs_and_gradients(config, seed):
    """The fast flat GPT (fused QKV, SDPA) computes what the plain reference does."""
    d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, n = config
    _, ref = _pair(d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab, max_len, seed)
    flat = reference_gpt.FlatGPT(vocab, d_model, n_layers, n_heads, n_kv_heads, max_len, d_ff).copy_from(ref)
    tokens = torch.randint(0, vocab, (3, n), generator=torch.Generator().manual_seed(300 + seed))
    logits, ref_logits = flat(tokens), ref(tokens)
    torch.testing.assert_close(logits, ref_logits, atol=2e-5, rtol=1e-4)
    (logits.square().mean()).backward()
    (ref_logits.square().mean()).backward()
    for fb, rb in zip(flat.blocks, ref.blocks):
        qkv = torch.cat([rb.wq.weight.grad, rb.wk.weight.grad, rb.wv.weight.grad])
        torch.testing.assert_close(fb.wqkv.weight.grad, qkv, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(fb.fc1.weight.grad, rb.fc1.weight.grad, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(fb.ln1.bias.grad, rb.ln1.bias.grad, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(flat.wte.grad, ref.wte.grad, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(flat.wpe.grad, ref.wpe.grad, atol=2e-5, rtol=1e-4)
