"""`tfamily export --format hf` for T5 and Longformer: a checkpoint imported from the peer and
exported again loads in transformers with the peer's logits (T5 and T5 v1.1; Longformer with
global tokens and a window per layer); an untied T5 head, which transformers 5 always ties, is
refused by name."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily.export.hf import export_hf

from .conftest import transformers
from .test_longformer import _inputs, _save as _longformer
from .test_t5 import VARIANTS, _ids, _save as _t5


def _load(path, auto):
    model, info = getattr(transformers, auto).from_pretrained(path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weight
    return model.eval()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_t5_goes_back_with_the_peers_logits(tmp_path, variant):
    hf = _t5(tmp_path / "src", variant)
    model, _ = tfamily.from_pretrained(tmp_path / "src")
    summary = export_hf(model, tmp_path / "back")
    assert summary["model_type"] == "t5"
    back = _load(tmp_path / "back", "AutoModelForSeq2SeqLM")
    src, tgt = _ids(30), _ids(20)
    with torch.no_grad():
        want = hf(input_ids=src, decoder_input_ids=tgt).logits
        assert (back(input_ids=src, decoder_input_ids=tgt).logits - want).abs().max().item() <= 1e-4
    assert all(torch.equal(t, back.state_dict()[k]) for k, t in hf.state_dict().items())


def test_longformer_goes_back_with_the_peers_logits(tmp_path):
    hf = _longformer(tmp_path / "src")
    model, _ = tfamily.from_pretrained(tmp_path / "src")
    assert export_hf(model, tmp_path / "back")["model_type"] == "longformer"
    back = _load(tmp_path / "back", "AutoModelForMaskedLM")
    ids, glob = _inputs()
    with torch.no_grad():
        want = hf(ids, global_attention_mask=glob.long()).logits
        assert (back(ids, global_attention_mask=glob.long()).logits - want).abs().max().item() <= 1e-4
        assert (back(ids).logits - hf(ids).logits).abs().max().item() <= 1e-4
    assert back.config.attention_window == hf.config.attention_window


def test_an_untied_t5_head_is_refused_by_name(tmp_path):
    _t5(tmp_path / "src", "t5_v1_1")
    _, spec = tfamily.from_pretrained(tmp_path / "src")
    untied = tfamily.build(spec.override({"tie_embeddings": False}))
    with pytest.raises(ValueError, match="tie_embeddings=False has no mapping") as e:
        export_hf(untied, tmp_path / "back")
    assert "\n" not in str(e.value) and "train a model with model.tie_embeddings=true" in str(e.value), e.value
    assert not (tmp_path / "back").exists()
