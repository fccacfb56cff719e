"""Longformer masked LMs from Hugging Face directories equal the peer: a two-sided sliding window
(per layer), global tokens given per example with their own q/k/v projections, padding masked;
inputs several windows long, so the window and the global keys both matter."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily.pretrained import PretrainedError, spec_of

from .conftest import save_hf

LONGFORMER = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=80, attention_window=[4, 8])


def _save(path, **extra):
    return save_hf(path, "LongformerForMaskedLM", "LongformerConfig", **{**LONGFORMER, **extra})


def _inputs(n: int = 30):
    ids = torch.randint(3, 53, (2, n))  # no pad id (1) inside a row
    glob = torch.zeros(2, n, dtype=torch.bool)
    glob[0, 0] = glob[0, 17] = glob[1, 5] = True  # a different count per row
    return ids, glob


def test_mlm_logits_equal_with_global_tokens_in_fp32_and_bf16(tmp_path):
    hf = _save(tmp_path)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.heads.global_qkv and [p.params["window"] for p in spec.pattern.per_layer] == [3, 5]
    ids, glob = _inputs()
    with torch.no_grad():
        want = hf(ids, global_attention_mask=glob.long()).logits
        assert (model(ids, global_tokens=glob) - want).abs().max().item() <= 1e-4
        model16, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
        assert (model16(ids, global_tokens=glob).float() - want).abs().max().item() <= 3e-2
        # without global tokens: the window alone, through the wrapped attention
        assert (model(ids) - hf(ids).logits).abs().max().item() <= 1e-4


def test_padding_is_masked_like_the_peers_attention_mask(tmp_path):
    hf = _save(tmp_path, attention_window=6)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.pattern.name == "sliding_window" and not spec.pattern.per_layer
    ids, glob = _inputs(21)  # not a multiple of the window: the peer pads it further
    real = torch.ones_like(glob)
    real[1, 15:] = False
    ids[1, 15:] = 1
    with torch.no_grad():
        want = hf(ids, attention_mask=real.long(), global_attention_mask=glob.long()).logits
        got = model(ids, key_padding=real, global_tokens=glob)
    assert (got[real] - want[real]).abs().max().item() <= 1e-4


def test_odd_window_is_refused(tmp_path):
    _save(tmp_path)
    cfg = tmp_path / "config.json"
    cfg.write_text(cfg.read_text().replace('"attention_window": [\n    4,\n    8\n  ]', '"attention_window": 5'))
    with pytest.raises(PretrainedError, match="attention_window=5 has no tfamily mapping; supported: an even"):
        spec_of(tmp_path)
