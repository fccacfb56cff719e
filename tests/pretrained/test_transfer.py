"""Changing an axis of an imported model (pretrained/transfer.py): every weight that still applies is
copied bit for bit, a longer learned table is filled the Longformer way, and what is new is named."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily.build import build
from tfamily.models import FirstToken
from tfamily.pretrained.transfer import longformer_fill, transfer

from .conftest import save_hf

GPT2 = dict(vocab_size=61, n_positions=32, n_embd=32, n_layer=2, n_head=4)
BERT = dict(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    save_hf(path, "GPT2LMHeadModel", "GPT2Config", **GPT2)
    return tfamily.from_pretrained(path)


def _moved(source, spec, **kw):
    torch.manual_seed(1)
    model = build(spec)
    return model, transfer(source, model, **kw)


def _same(a, b, names):
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[n], sb[n]) for n in names)


@pytest.mark.parametrize("override", [
    {"pattern": {"name": "sliding_window", "params": {"window": 8}}},
    {"pattern": {"name": "bigbird", "params": {"block": 4, "n_random": 1}}},
    {"state": {"name": "xl_memory", "mem_len": 16}},
], ids=["sliding_window", "bigbird", "xl_memory"])
def test_a_pattern_or_state_keeps_every_weight(gpt2, override):
    source, spec = gpt2
    model, report = _moved(source, spec.override(override))
    assert report.new == [] and report.dropped == [] and report.extended == []
    assert len(report.kept) == len(source.state_dict()) - 1  # the tied head is the embedding
    assert _same(source, model, source.state_dict())
    ids = torch.randint(0, 61, (1, 24))
    with torch.no_grad():
        assert model.eval()(ids).shape == (1, 24, 61)


def test_a_longer_position_table_is_the_source_copied(gpt2):
    source, spec = gpt2
    model, report = _moved(source, spec.override({"position.max_len": 128}))
    old, new = source.position.table.weight, model.position.table.weight
    assert new.shape == (128, 32) and torch.equal(new, torch.cat([old] * 4))
    assert torch.equal(longformer_fill(old, 40)[32:], old[:8])
    assert report.new == [] and report.extended == [
        "position.table.weight 32 -> 128 rows (the table copied 4 times, as Longformer extends RoBERTa's)"]
    assert _same(source, model, [n for n in report.kept])
    with torch.no_grad():  # the first 32 positions compute what the source computes
        ids = torch.randint(0, 61, (1, 20))
        assert torch.equal(model.eval()(ids), source(ids))


def test_new_parts_are_named_and_the_old_ones_dropped(gpt2):
    source, spec = gpt2
    model, report = _moved(source, spec.override({"position": {"name": "relative", "max_len": 32},
                                                  "state": {"name": "xl_memory", "mem_len": 16}}))
    assert "position.table.weight" in report.dropped
    assert report.new and all("position" in n for n in report.new)
    assert any("blocks.*" in line or "position" in line for line in report.lines())
    assert _same(source, model, report.kept)


def test_an_encoder_becomes_a_classifier_read_at_its_first_token(tmp_path):
    save_hf(tmp_path, "BertForMaskedLM", "BertConfig", **BERT)
    source, spec = tfamily.from_pretrained(tmp_path)
    target = spec.override({"model": "classifier",
                            "objective": {"name": "classification", "params": {"n_classes": 3, "pool": "first"}}})
    model, report = _moved(source, target, keep_head=False)
    assert sorted(report.new) == ["head.proj.bias", "head.proj.weight"] and isinstance(model.head.pool, FirstToken)
    assert "head.transform.0.weight" in report.dropped and "head.bias" in report.dropped
    assert _same(source, model, report.kept) and "embed_norm.weight" in report.kept
    x = torch.randint(5, 53, (2, 9))
    other = x.clone()
    other[:, 5:] = torch.randint(5, 53, (2, 4))
    real = torch.ones(2, 9, dtype=torch.bool)
    real[:, 5:] = False
    with torch.no_grad():  # the [CLS] position never sees the padding
        assert torch.allclose(model.eval()(x, key_padding=real), model(other, key_padding=real), atol=1e-6)
