"""BERT and RoBERTa masked LMs from Hugging Face directories equal the peers: the MLM head's
logits in fp32 and bf16, with padding masked, and the embedding norm as a choice."""
from __future__ import annotations

import pytest
import torch

import tfamily

from .conftest import save_hf

BERT = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40)
PEERS = {"bert": ("BertForMaskedLM", "BertConfig", BERT), "roberta": ("RobertaForMaskedLM", "RobertaConfig", BERT)}


def _ids(n: int = 20) -> torch.Tensor:
    return torch.randint(3, 53, (2, n))  # no pad ids (0 for BERT, 1 for RoBERTa) inside a row


@pytest.mark.parametrize("kind", sorted(PEERS))
def test_mlm_logits_equal_in_fp32_and_bf16(tmp_path, kind):
    cls, cfg, config = PEERS[kind]
    hf = save_hf(tmp_path, cls, cfg, **config)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.model == "encoder" and spec.norm.embed and spec.residual.name == "post_norm"
    ids = _ids()
    with torch.no_grad():
        want = hf(ids).logits
        assert (model(ids) - want).abs().max().item() <= 1e-4
        model16, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
        assert (model16(ids).float() - want).abs().max().item() <= 3e-2


@pytest.mark.parametrize("kind", sorted(PEERS))
def test_padding_is_masked_like_the_peers_attention_mask(tmp_path, kind):
    cls, cfg, config = PEERS[kind]
    hf = save_hf(tmp_path, cls, cfg, **config)
    model, _ = tfamily.from_pretrained(tmp_path)
    ids, real = _ids(12), torch.ones(2, 12, dtype=torch.bool)
    real[1, 8:] = False
    ids[1, 8:] = hf.config.pad_token_id
    with torch.no_grad():
        want = hf(ids, attention_mask=real.long()).logits
        got = model(ids, key_padding=real)
    assert (got[real] - want[real]).abs().max().item() <= 1e-4
