"""BigBird masked LMs from Hugging Face directories equal the peer in eval mode: block-sparse
inputs (longer than (5 + 2 r) blocks, where the peer does not fall back to full attention), a
length that is not a multiple of the block (the peer's padded last block is global), padding,
and the fall-back on a short input."""
from __future__ import annotations

import pytest
import torch

import tfamily

from .conftest import save_hf, transformers
from .test_bert import sharpen_head

BIGBIRD = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=160, hidden_act="gelu", block_size=8, num_random_blocks=2,
               attention_type="block_sparse")


def _peer(path, **extra):
    return save_hf(path, "BigBirdForMaskedLM", "BigBirdConfig", **{**BIGBIRD, **extra})


@pytest.mark.parametrize("n", [96, 123])  # > (5 + 2 * 2) * 8 = 72: block-sparse in the peer
def test_block_sparse_logits_equal_the_peer_in_fp32_and_bf16(tmp_path, n):
    hf = _peer(tmp_path)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.pattern.name == "bigbird_itc" and spec.kernel.name == "blocksparse"
    ids = torch.randint(2, 53, (2, n))
    with torch.no_grad():
        want = hf(ids).logits
        assert hf.bert.attention_type == "block_sparse"  # no fall-back happened
        assert (model(ids) - want).abs().max().item() <= 1e-4
        model16, _ = tfamily.from_pretrained(tmp_path, dtype=torch.bfloat16)
        assert (model16(ids).float() - want).abs().max().item() <= 3e-2


def test_padding_is_masked_like_the_peers_attention_mask(tmp_path):
    hf = _peer(tmp_path)
    model, _ = tfamily.from_pretrained(tmp_path)
    ids = torch.randint(2, 53, (2, 104))
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, 90:] = False
    ids[1, 90:] = 0
    with torch.no_grad():
        want = hf(ids, attention_mask=real.long()).logits
        got = model(ids, key_padding=real)
    assert (got[real] - want[real]).abs().max().item() <= 1e-4


def test_short_inputs_fall_back_to_full_attention_as_the_peer_does(tmp_path):
    hf = _peer(tmp_path)
    model, _ = tfamily.from_pretrained(tmp_path)
    ids = torch.randint(2, 53, (2, 40))
    with torch.no_grad():
        assert (model(ids) - hf(ids).logits).abs().max().item() <= 1e-4
    assert hf.bert.attention_type == "original_full"



@pytest.mark.parametrize("key, value, words", [
    ("rescale_embeddings", True, ["rescale_embeddings=True", "sqrt(d_model)", "supported: False, None"]),
    ("use_bias", False, ["use_bias=False", "supported: True, None"]),
    ("attention_type", "sliding", ["attention_type='sliding'", "supported: 'block_sparse', 'original_full'"]),
])
def test_a_field_tfamily_does_not_map_is_refused_in_one_line_naming_it(tmp_path, capsys, key, value, words):
    import json

    from tfamily import cli
    _peer(tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    capsys.readouterr()
    assert cli.main(["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "out").exists()


def test_gelu_new_checkpoints_equal_the_peer_with_a_tanh_gelu_head(tmp_path):
    # google/bigbird-roberta-base's hidden_act: the peer's feed-forward and MLM head are tanh-GELU.
    hf = _peer(tmp_path, hidden_act="gelu_new")
    sharpen_head(hf, tmp_path, hf.cls.predictions.transform)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.ff.activation == "gelu_tanh" and spec.pattern.name == "bigbird_itc"
    ids = torch.randint(2, 53, (2, 104))
    with torch.no_grad():
        want = hf(ids).logits
        assert hf.bert.attention_type == "block_sparse"
        assert (model(ids) - want).abs().max().item() <= 1e-4
        model.head.transform[1] = torch.nn.GELU()  # an erf head would not pass: the test can tell
        assert (model(ids) - want).abs().max().item() > 1e-4
