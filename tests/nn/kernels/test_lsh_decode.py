"""LSH attention for some query rows (decoding with a KV cache, XL memory) attends exactly the
keys the whole-sequence pass gives those queries: token-by-token decoding equals the forward
pass, in the kernel and through the Reformer member with its cache, and rows computed alone
equal the same rows of the forward pass in outputs and gradients."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.models.generate import generate
from tfamily.nn.kernels.lsh import LSHKernel
from tfamily.nn.patterns import Causal, Full

DT = torch.float64


def _qkv(n, seed, b=2, h=3, e=8):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, e, generator=gen, dtype=DT)
    return q, F.normalize(q, dim=-1), torch.randn(b, h, n, e, generator=gen, dtype=DT)


@pytest.mark.parametrize("n_hashes", [1, 3])
@pytest.mark.parametrize("memory_efficient", [True, False])
def test_token_by_token_decoding_equals_the_forward_pass(n_hashes, memory_efficient):
    # Fixed bucket count: the rotations drawn for one call do not depend on the length, so
    # every step (reseeded) hashes with the forward pass's rotations; lengths cross chunks.
    kernel = LSHKernel(n_hashes=n_hashes, n_buckets=4, chunk_len=3, memory_efficient=memory_efficient)
    for seed, n in ((0, 17), (1, 24)):
        q, k, v = _qkv(n, seed)
        torch.manual_seed(50 + seed)
        full = kernel(q, k, v, pattern=Causal())[0]
        for t in range(n):
            torch.manual_seed(50 + seed)
            step = kernel(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], pattern=Causal(), q_offset=t)[0]
            torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-12, rtol=0,
                                       msg=lambda s: f"step {t}: {s}")


@pytest.mark.parametrize("n_hashes", [1, 2])
def test_decoding_equals_recomputing_the_prefix_when_buckets_follow_the_length(n_hashes):
    # Derived bucket count (about t / bucket_size): recomputation over the prefix uses the
    # same count as the step, as generate(use_cache=False) does.
    kernel = LSHKernel(n_hashes=n_hashes, bucket_size=3)
    q, k, v = _qkv(20, 7)
    for t in range(20):
        torch.manual_seed(t)
        step = kernel(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], pattern=Causal(), q_offset=t)[0]
        torch.manual_seed(t)
        full = kernel(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], pattern=Causal())[0]
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-12, rtol=0)


@pytest.mark.parametrize("pattern", [Causal(), Full()], ids=lambda p: p.name)
@pytest.mark.parametrize("same_bucket_only", [True, False])
def test_rows_equal_the_same_rows_of_the_forward_pass_with_gradients(pattern, same_bucket_only):
    # The last 7 of 23 positions as queries against all keys (XL memory, a prefill after a
    # prompt): outputs and gradients w.r.t. q, k, v equal those of the forward pass's rows.
    kernel = LSHKernel(n_hashes=3, n_buckets=4, chunk_len=4, same_bucket_only=same_bucket_only)
    q, k, v = (t.requires_grad_() for t in _qkv(23, 3))
    pad = torch.ones(2, 23, dtype=torch.bool)
    pad[1, :2] = False
    w = torch.randn(2, 3, 7, 8, dtype=DT)

    def run(fn):
        torch.manual_seed(9)
        out = fn()
        return (out, *torch.autograd.grad((out * w).sum(), (q, k, v)))

    got = run(lambda: kernel(q[:, :, 16:], k, v, pattern=pattern, q_offset=16, key_padding=pad)[0])
    want = run(lambda: kernel(q, k, v, pattern=pattern, key_padding=pad)[0][:, :, 16:])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_rows_with_a_bias_equal_the_forward_pass():
    kernel = LSHKernel(n_hashes=2, n_buckets=4, chunk_len=4)
    q, k, v = _qkv(15, 4)
    bias = torch.randn(1, 3, 15, 15, dtype=DT)
    torch.manual_seed(2)
    full = kernel(q, k, v, pattern=Causal(), bias=bias)[0]
    torch.manual_seed(2)
    rows = kernel(q[:, :, 10:], k, v, pattern=Causal(), q_offset=10, bias=bias[:, :, 10:])[0]
    torch.testing.assert_close(rows, full[:, :, 10:], atol=1e-12, rtol=0)


def _reformer(n_buckets=None):
    params = {"n_hashes": 2, "bucket_size": 4} | ({"n_buckets": n_buckets} if n_buckets else {})
    torch.manual_seed(0)
    return tfamily.build(members.reformer(d_model=32, dropout=0.0, vocab_size=13, depth__n_layers=2,
                                          heads__n_heads=2, ff__d_ff=64, kernel__params=params)).eval()


def test_reformer_cache_decoding_equals_the_forward_pass():
    # A prompt in one call, then one token per step, each call reseeded like the forward pass:
    # logits at every position equal the forward pass's over the whole sequence.
    model = _reformer(n_buckets=4)
    x = torch.randint(0, 13, (2, 19))
    with torch.no_grad():
        torch.manual_seed(1)
        full = model(x)
        state = model.new_state()
        torch.manual_seed(1)
        torch.testing.assert_close(model(x[:, :5], state=state), full[:, :5], atol=1e-5, rtol=1e-5)
        for t in range(5, 19):
            torch.manual_seed(1)
            step = model(x[:, t:t + 1], state=state)[:, -1]
            torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5, msg=lambda s: f"step {t}: {s}")


@pytest.mark.parametrize("n_buckets", [None, 4])
def test_reformer_generation_with_the_cache_equals_generation_without(n_buckets):
    model = _reformer(n_buckets)
    prompt = torch.randint(0, 13, (2, 3))
    torch.manual_seed(5)
    cached = generate(model, prompt, 14, greedy=True)
    torch.manual_seed(5)
    assert torch.equal(cached, generate(model, prompt, 14, greedy=True, use_cache=False))
