"""Masked-LM heads tied and untied (BERT, RoBERTa, Longformer, BigBird) equal the peer on import
and after ``export --format hf``: untied, transformers reads the decoder's own bias. Sentence pairs:
the token-type table is kept, read from ``token_types`` as the peer reads ``token_type_ids``, and
written back. In fp64 the imports equal the peer's fp64 logits to 1e-9: a single token-type row
folded into the positions and T5's d^-0.5 output scale are computed in the model's dtype."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

import tfamily
from tfamily.export.hf import export_hf

from .conftest import save_hf, transformers
from .test_hf_encoders import _load

BASE = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
PEERS = {"bert": ("BertForMaskedLM", "BertConfig", dict(max_position_embeddings=40)),
         "roberta": ("RobertaForMaskedLM", "RobertaConfig", dict(max_position_embeddings=40)),
         "longformer": ("LongformerForMaskedLM", "LongformerConfig",
                        dict(max_position_embeddings=40, attention_window=[4, 8])),
         "big_bird": ("BigBirdForMaskedLM", "BigBirdConfig",
                      dict(max_position_embeddings=40, block_size=4, num_random_blocks=1, hidden_act="gelu"))}


def _peer(path, kind: str, tied: bool, types: int = 2):
    cls, cfg, own = PEERS[kind]
    hf = save_hf(path, cls, cfg, **BASE, **own, tie_word_embeddings=tied, type_vocab_size=types)
    head = hf.lm_head if hasattr(hf, "lm_head") else hf.cls.predictions
    # Untied, the decoder's bias is a parameter of its own; save_hf's noise makes it differ from the
    # head's unread ``bias`` by 0.3, so reading the wrong one shows.
    assert (head.decoder.bias is head.bias) == tied
    return hf


def _ids(n: int = 20) -> torch.Tensor:
    return torch.randint(3, 53, (2, n))  # no pad id (0 for BERT, 1 for RoBERTa) inside a row


def _pair(ids: torch.Tensor) -> torch.Tensor:
    """Sentence A then B, split at a different token per row."""
    types = torch.zeros_like(ids)
    types[0, 9:], types[1, 5:] = 1, 1
    return types


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("kind", sorted(PEERS))
def test_a_tied_or_untied_head_and_pairs_import_and_go_back_with_the_peers_logits(tmp_path, kind, tied):
    hf = _peer(tmp_path / "src", kind, tied)
    model, spec = tfamily.from_pretrained(tmp_path / "src")
    assert spec.tie_embeddings == tied and spec.token_types == 2
    ids, types = _ids(), _pair(_ids())
    with torch.no_grad():
        want, want_pair = hf(ids).logits, hf(ids, token_type_ids=types).logits
        assert _gap(want_pair, want) > 0.05  # type 1's row matters
        assert _gap(model(ids), want) <= 1e-4
        assert _gap(model(ids, token_types=types), want_pair) <= 1e-4
    if kind == "big_bird":  # its ITC pattern has no export mapping
        return
    export_hf(model, tmp_path / "back")
    back = _load(tmp_path / "back", "AutoModelForMaskedLM")  # no weight missing or unexpected
    assert back.config.tie_word_embeddings == tied and back.config.type_vocab_size == 2
    with torch.no_grad():
        assert _gap(back(ids).logits, want) <= 1e-4
        assert _gap(back(ids, token_type_ids=types).logits, want_pair) <= 1e-4


def test_a_built_untied_bert_with_token_types_goes_back_with_its_own_logits(tmp_path):
    spec = tfamily.members.get("bert")(vocab_size=61, d_model=32, heads={"n_heads": 4}, depth={"n_layers": 2},
                                       position={"max_len": 32}, dropout=0.0, scale_embeddings=False,
                                       logit_scale=False, tie_embeddings=False, token_types=2).override(
                                           {"norm.embed": True})
    torch.manual_seed(0)
    model = tfamily.build(spec).eval()
    with torch.no_grad():
        model.head.bias.normal_()
    export_hf(model, tmp_path / "hf")
    back = _load(tmp_path / "hf", "AutoModelForMaskedLM")
    ids = torch.randint(0, 61, (2, 24))
    with torch.no_grad():
        assert _gap(back(ids).logits, model(ids)) <= 1e-4
        assert _gap(back(ids, token_type_ids=_pair(ids)).logits, model(ids, token_types=_pair(ids))) <= 1e-4


def test_an_untied_head_saved_with_one_bias_reads_that_bias(tmp_path):
    """transformers 4 tied the decoder's bias to the head's whatever the config said, so its
    untied checkpoints hold ``cls.predictions.bias`` alone, the bias that model used."""
    hf = _peer(tmp_path, "bert", tied=False)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["cls.predictions.decoder.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    model, _ = tfamily.from_pretrained(tmp_path)
    ids = _ids()
    with torch.no_grad():
        hf.cls.predictions.decoder.bias.copy_(hf.cls.predictions.bias)
        assert _gap(model(ids), hf(ids).logits) <= 1e-4


@pytest.mark.parametrize("kind, types", [("bert", 1), ("bert", 2), ("roberta", 1)])
def test_fp64_imports_equal_the_peers_fp64_logits(tmp_path, kind, types):
    # type_vocab_size 1: the one token-type row is folded into the position table; 2: kept.
    _peer(tmp_path, kind, tied=True, types=types)
    hf = getattr(transformers, PEERS[kind][0]).from_pretrained(tmp_path, dtype=torch.float64).eval()
    model, spec = tfamily.from_pretrained(tmp_path, dtype=torch.float64)
    assert spec.token_types == (0 if types == 1 else types)
    ids = _ids()
    with torch.no_grad():
        assert _gap(model(ids), hf(ids).logits) <= 1e-9


def test_t5s_output_scale_is_exact_in_fp64(tmp_path):
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    from .test_t5 import _ids as _t5_ids, _save
    _save(tmp_path, "t5")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path, dtype=torch.float64).eval()
    for norm in hf.modules():  # the peer's RMSNorm takes its mean square in fp32 whatever the dtype
        if isinstance(norm, T5LayerNorm):
            norm.forward = lambda h, n=norm: n.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                                                       + n.variance_epsilon)
    model, spec = tfamily.from_pretrained(tmp_path, dtype=torch.float64)
    assert model.head.logit_scale.item() == spec.d_model ** -0.5
    src, tgt = _t5_ids(30), _t5_ids(20)
    with torch.no_grad():
        assert _gap(model(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits) <= 1e-9
