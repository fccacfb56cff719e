"""GPT-2 from a Hugging Face directory equals the peer: logits in fp32 and bf16, greedy decoding."""
from __future__ import annotations

import torch

import tfamily
from tfamily.models.generate import generate

from .conftest import hf_greedy, save_hf

CONFIG = dict(vocab_size=61, n_positions=32, n_embd=32, n_layer=2, n_head=4)


def _pair(tmp_path, **over):
    hf = save_hf(tmp_path, "GPT2LMHeadModel", "GPT2Config", **{**CONFIG, **over})
    return hf, tfamily.from_pretrained(tmp_path)


def test_logits_equal_in_fp32(tmp_path):
    hf, (model, spec) = _pair(tmp_path)
    ids = torch.randint(0, 61, (2, 20))
    with torch.no_grad():
        diff = (model(ids) - hf(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff
    assert spec.member == "gpt2" and spec.ff.activation == "gelu_tanh"


def test_bf16_is_close_to_the_fp32_peer(tmp_path):
    hf = save_hf(tmp_path, "GPT2LMHeadModel", "GPT2Config", **CONFIG)
    model, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
    ids = torch.randint(0, 61, (2, 20))
    with torch.no_grad():
        diff = (model(ids).float() - hf(ids).logits).abs().max().item()
    assert diff <= 3e-2, diff


def test_untied_head_and_relu(tmp_path):
    hf, (model, spec) = _pair(tmp_path, tie_word_embeddings=False, activation_function="relu")
    ids = torch.randint(0, 61, (1, 12))
    assert not spec.tie_embeddings
    with torch.no_grad():
        assert (model(ids) - hf(ids).logits).abs().max().item() <= 1e-4


def test_greedy_generation_with_kv_cache_is_token_identical(tmp_path):
    hf = save_hf(tmp_path, "GPT2LMHeadModel", "GPT2Config", **CONFIG).double()
    model, _ = tfamily.from_pretrained(tmp_path, dtype=torch.float64)
    prompt = torch.randint(0, 61, (1, 5))
    want = hf_greedy(hf, prompt, 20)
    got = generate(model, prompt, 20, greedy=True)
    assert torch.equal(got, want)
