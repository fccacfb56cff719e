"""Every decoder member, through the public API, over several seeds and lengths:
- causal: editing tokens after position i never changes the logits at positions <= i;
- cached decoding equals recomputation: feeding one token at a time through ``new_state()``
  gives, at every step, the logits of a fresh forward pass over the whole prefix.

The Reformer hashes with fresh random rotations on every call (as the paper and Hugging Face
do), so every call reseeds torch's generator alike: "a function of the input" means for the same
rotations.

Sparse members get small blocks and windows so that their patterns are really sparse at these
lengths (the papers' sizes would make every pattern dense below 64 tokens)."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members

V = 23
SMALL = dict(vocab_size=V, d_model=32, dropout=0.0, depth__n_layers=2, heads__n_heads=2)
PATTERNS = {  # member -> a small pattern of the same kind
    "sparse_transformer_strided": dict(name="strided", params=dict(stride=4, combine="heads")),
    "sparse_transformer_fixed": dict(name="fixed", params=dict(block=8, summary=2, combine="heads")),
    "longformer": dict(name="longformer", params=dict(window=4, n_global=1)),
    "bigbird": dict(name="bigbird", params=dict(block=4, n_random=1)),
    "image_transformer_1d": dict(name="local_1d", params=dict(block=4, memory=4)),
    "image_transformer_2d": dict(name="local_2d", params=dict(width=6, block_h=2, block_w=3, memory_h=2,
                                                               memory_w=1)),
}
EXTRA = {
    # A fixed bucket count: with the count derived from the length (the default), a cached key was
    # hashed when the sequence was shorter, so only the same rotations AND count make decoding a
    # recomputation (tests/nn/kernels/test_lsh_decode.py covers the derived count per layer).
    "reformer": dict(kernel=dict(name="lsh", params=dict(n_hashes=2, bucket_size=4, n_buckets=4))),
    "transformer_xl": dict(state__mem_len=64),
    "llama": dict(heads__n_kv_heads=1),  # 8 key/value heads cannot serve 2 query heads
    "adaptive_span": dict(state__mem_len=64, pattern=dict(name="adaptive_span",
                                                          params=dict(max_span=16, ramp=4, l1=2e-6))),
}
DECODERS = [m["name"] for m in members.describe() if m["model"] == "decoder"]


def _model(name: str, seed: int):
    kw = dict(SMALL, **EXTRA.get(name, {}))
    if name in PATTERNS:
        kw["pattern"] = PATTERNS[name]
    if "learned" == members.get(name)().position.name:
        kw["position__max_len"] = 64
    torch.manual_seed(seed)
    model = tfamily.build(members.get(name)(**kw)).eval()
    with torch.no_grad():  # untrained heads are near uniform: sharpen so differences show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def _seeded(model, x, seed, **kw):
    torch.manual_seed(seed)
    return model(x, **kw)


def test_every_decoder_member_is_covered():
    assert {"gpt", "reformer", "transformer_xl", "universal_transformer_lm"} <= set(DECODERS)
    assert set(PATTERNS) | set(EXTRA) <= set(DECODERS)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", DECODERS)
def test_a_later_edit_never_changes_earlier_logits(name, seed):
    model = _model(name, seed)
    g = torch.Generator().manual_seed(100 + seed)
    for n in (9, 17, 30):
        x = torch.randint(0, V, (2, n), generator=g)
        i = int(torch.randint(0, n - 1, (1,), generator=g))
        edited = x.clone()
        edited[:, i + 1:] = torch.randint(0, V, (2, n - i - 1), generator=g)
        with torch.no_grad():
            a, b = _seeded(model, x, seed), _seeded(model, edited, seed)
        torch.testing.assert_close(a[:, :i + 1], b[:, :i + 1], atol=1e-5, rtol=1e-5,
                                   msg=lambda m: f"{name}, n={n}, edit after {i}: {m}")
        assert not torch.allclose(a[:, i + 1:], b[:, i + 1:]), (name, n, i)  # the edit reached the model


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", DECODERS)
def test_cached_decoding_equals_recomputing_the_prefix(name, seed):
    model = _model(name, seed)
    g = torch.Generator().manual_seed(200 + seed)
    n, prompt = 21, 1 + seed * 3
    x = torch.randint(0, V, (2, n), generator=g)
    state = model.new_state()
    with torch.no_grad():
        got = [_seeded(model, x[:, :prompt], seed, state=state)[:, -1]]
        got += [_seeded(model, x[:, t:t + 1], seed, state=state)[:, -1] for t in range(prompt, n)]
        want = [_seeded(model, x[:, :t + 1], seed)[:, -1] for t in range(prompt - 1, n)]
    for t, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5,
                                   msg=lambda m: f"{name}: step {prompt - 1 + t}: {m}")
