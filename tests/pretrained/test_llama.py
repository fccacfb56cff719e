"""Llama and Mistral from Hugging Face directories equal the peers: GQA, RMSNorm, SwiGLU, rotary
with a non-default base, Mistral's sliding window; logits in fp32 and bf16, greedy decoding."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily.models.generate import generate
from tfamily.pretrained import PretrainedError

from .conftest import hf_greedy, save_hf

LLAMA = dict(vocab_size=67, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rope_theta=500.0)
MISTRAL = {**LLAMA, "sliding_window": 5}
PEERS = {"llama": ("LlamaForCausalLM", "LlamaConfig", LLAMA),
         "mistral": ("MistralForCausalLM", "MistralConfig", MISTRAL)}


def _logit_diff(model, hf, dtype=torch.float32, n=24) -> float:
    ids = torch.randint(0, 67, (2, n))
    with torch.no_grad():
        return (model(ids).to(dtype) - hf(ids).logits.to(dtype)).abs().max().item()


@pytest.mark.parametrize("kind", sorted(PEERS))
def test_logits_equal_in_fp32_and_bf16(tmp_path, kind):
    cls, cfg, config = PEERS[kind]
    hf = save_hf(tmp_path, cls, cfg, **config)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.heads.kv_heads == 2 and spec.norm.name == "rms_norm" and spec.ff.name == "glu"
    assert spec.pattern.name == ("sliding_window" if kind == "mistral" else "causal")
    assert _logit_diff(model, hf) <= 1e-4
    model16, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert _logit_diff(model16, hf) <= 3e-2


def test_tied_head_and_head_dim(tmp_path):
    hf = save_hf(tmp_path, "LlamaForCausalLM", "LlamaConfig", **{**LLAMA, "tie_word_embeddings": True,
                                                                  "head_dim": 16})
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.tie_embeddings and spec.d_head == 16
    assert _logit_diff(model, hf) <= 1e-4


@pytest.mark.parametrize("kind", sorted(PEERS))
def test_greedy_generation_with_kv_cache_is_token_identical(tmp_path, kind):
    cls, cfg, config = PEERS[kind]
    hf = save_hf(tmp_path, cls, cfg, **config).double()
    model, _ = tfamily.from_pretrained(tmp_path, dtype=torch.float64)
    prompt = torch.randint(0, 67, (1, 4))
    assert torch.equal(generate(model, prompt, 16, greedy=True), hf_greedy(hf, prompt, 16))


def test_scaled_rope_is_refused(tmp_path):
    save_hf(tmp_path, "LlamaForCausalLM", "LlamaConfig",
            **{**LLAMA, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}})
    with pytest.raises(PretrainedError, match="rope_parameters/rope_scaling=.*linear.*supported: rope_type 'default'"):
        tfamily.from_pretrained(tmp_path)
