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


def sharpen_head(hf, path, transform) -> None:
    """The head's dense and norm weights scaled up and saved again, so its pre-activations spread
    over several units and the logits are not small: erf and tanh GELU then differ in them by more
    than the 1e-4 the tests compare at."""
    with torch.no_grad():
        transform.dense.weight.mul_(10.0)
        transform.LayerNorm.weight.mul_(30.0)
    hf.save_pretrained(path)


@pytest.mark.parametrize("act", ["gelu_new", "gelu_pytorch_tanh"])
def test_tanh_gelu_checkpoints_equal_the_peer_in_ff_and_head(tmp_path, act):
    hf = save_hf(tmp_path, "BertForMaskedLM", "BertConfig", **BERT, hidden_act=act)
    sharpen_head(hf, tmp_path, hf.cls.predictions.transform)
    model, spec = tfamily.from_pretrained(tmp_path)
    assert spec.ff.activation == "gelu_tanh"
    ids = _ids()
    with torch.no_grad():
        want = hf(ids).logits
        assert (model(ids) - want).abs().max().item() <= 1e-4
        model.head.transform[1] = torch.nn.GELU()  # an erf head would not pass: the test can tell
        assert (model(ids) - want).abs().max().item() > 1e-4


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_roberta_with_a_hidden_act_its_erf_head_does_not_follow_is_refused(tmp_path, act):
    from tfamily.pretrained.load import PretrainedError
    save_hf(tmp_path, "RobertaForMaskedLM", "RobertaConfig", **BERT, hidden_act=act)
    with pytest.raises(PretrainedError, match=f"hidden_act='{act}'.*roberta.*supported: 'gelu'$"):
        tfamily.from_pretrained(tmp_path)


def test_a_tanh_gelu_checkpoint_exports_back_as_gelu_new(tmp_path):
    from tfamily.export import hf as export
    save_hf(tmp_path, "BertForMaskedLM", "BertConfig", **BERT, hidden_act="gelu_pytorch_tanh")
    _, spec = tfamily.from_pretrained(tmp_path)
    config, _ = export.hf_config(spec)
    assert config["hidden_act"] == "gelu_new"


def test_a_relu_checkpoint_is_refused_naming_the_supported_activations(tmp_path):
    from tfamily.pretrained.load import PretrainedError
    save_hf(tmp_path, "BertForMaskedLM", "BertConfig", **BERT, hidden_act="relu")
    with pytest.raises(PretrainedError, match="hidden_act='relu'.*'gelu', 'gelu_new', 'gelu_pytorch_tanh'"):
        tfamily.from_pretrained(tmp_path)


def test_the_bert_members_logits_are_unchanged_by_the_head_activation_choice():
    # The head's activation follows the feed-forward's only for tanh-GELU: the member's logits (and
    # every checkpoint trained with its head) are what the erf-GELU head computed before.
    from torch import nn

    from tfamily import members
    spec = members.get("bert")(vocab_size=61, d_model=32, heads={"n_heads": 4}, depth={"n_layers": 2},
                               position={"max_len": 32}, dropout=0.0)
    torch.manual_seed(0)
    model = tfamily.build(spec).eval()
    ids = torch.randint(0, spec.vocab_size, (2, 12))
    with torch.no_grad():
        got = model(ids)
        model.head.transform[1] = nn.GELU()  # the head as it was built before the choice
        assert torch.equal(got, model(ids))
