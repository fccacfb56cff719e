"""Fine-tuning (train/finetune.py): --init-from a Hugging Face directory or a run, a labelled file as a
classification task, an axis changed on the way, and LoRA (adapters and head train, the rest frozen)."""
from __future__ import annotations

import csv
import random

import pytest
import torch

from tfamily.nn.lora import is_adapter, merge
from tfamily.train import loop
from tfamily.train.config import load
from tfamily.train.sample import evaluate_trained, load_trained

transformers = pytest.importorskip("transformers", reason="the fine-tuning tests start from transformers models")
tokenizers = pytest.importorskip("tokenizers")

WORDS = {"pos": "good great fine lovely".split(), "neg": "bad awful poor dull".split()}
FILL = "the a movie film plot was is very".split()
RUN = {"train.batch_size": 16, "train.lr": 3e-3, "train.warmup": 2, "train.eval_every": None, "train.eval_tokens": None,
       "train.ckpt_every": None, "train.precision": "fp32", "train.threads": 1, "train.progress": False,
       "train.tensorboard": False, "model.dropout": 0.0}


def _reviews(path, n=160):
    rng = random.Random(0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for _ in range(n):
            label = rng.choice(sorted(WORDS))
            words = rng.choices(FILL, k=4) + [rng.choice(WORDS[label])]
            rng.shuffle(words)
            w.writerow([" ".join(words), label])
    return str(path)


def _bert_tokenizer(path):
    """A word-level tokenizer.json with BERT's special tokens and its [CLS] ... [SEP] template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*special, *FILL, *sum(WORDS.values(), [])])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(special)
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=260, n_positions=32, n_embd=32, n_layer=2,
                                                                n_head=4))
    gpt2.save_pretrained(root / "gpt2")
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=32))
    bert.save_pretrained(root / "bert")
    _bert_tokenizer(root / "bert")
    return root


def _trainer(tmp_path, **over):
    return loop.Trainer(load(None, {**RUN, "train.out": str(tmp_path / "run"), **over}))


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_fine_tuning_on_a_csv_lowers_the_loss(tmp_path, hf, kind):
    tr = _trainer(tmp_path, **{"train.init_from": str(hf / kind), "data.corpus": _reviews(tmp_path / "r.csv"),
                               "train.max_steps": 40})
    try:
        assert tr.spec.model == "classifier" and tr.spec.objective.params["n_classes"] == 2
        assert tr.spec.objective.params.get("pool") == ("first" if kind == "bert" else None)
        assert type(tr.model.head.pool).__name__ == ("FirstToken" if kind == "bert" else "LastToken")
        assert any("new: head.proj.weight, head.proj.bias" in n for n in tr.notes)
        before = tr.evaluate()["loss"]
        result = tr.fit()
    finally:
        tr.close()
    assert result["val_loss"] < before and result["val_acc"] >= 0.75
    again = evaluate_trained(load_trained(tmp_path / "run"))  # `tfamily eval` reads the file with the run's tokenizer
    assert again["val_acc"] == pytest.approx(result["val_acc"])
    assert again["val_loss"] == pytest.approx(result["val_loss"])


def test_lora_trains_the_adapters_and_head_only_and_merges(tmp_path, hf):
    tr = _trainer(tmp_path, **{"train.init_from": str(hf / "gpt2"), "data.corpus": _reviews(tmp_path / "r.csv"),
                               "train.max_steps": 5, "train.lora.rank": 2})
    frozen = {n: p.detach().clone() for n, p in tr.model.named_parameters() if not p.requires_grad}
    moving = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    try:
        assert frozen and all(is_adapter(n) or n.startswith("head.") for n in moving)
        assert any("lora rank 2" in n for n in tr.notes)
        tr.fit()
        batch = tr.task.val.x[:4], tr.task.val.key_padding[:4]
    finally:
        tr.close()
    after = dict(tr.model.named_parameters())
    assert all(torch.equal(after[n], t) for n, t in frozen.items())  # bit-identical
    assert all(not torch.equal(after[n], t) for n, t in moving.items() if n.endswith("lora_b"))
    with torch.no_grad():
        adapted = tr.model.eval()(batch[0], key_padding=batch[1])
        merged = load_trained(tmp_path / "run", "cpu").model  # what eval, generate and export read
        assert not any(is_adapter(n) for n, _ in merged.named_parameters())
        assert torch.allclose(merged(batch[0], key_padding=batch[1]), adapted, atol=1e-6)
        assert torch.equal(merge(tr.model)(batch[0], key_padding=batch[1]), adapted)


def test_an_axis_changed_from_a_run_keeps_its_weights(tmp_path, hf):
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 60)
    tr = _trainer(tmp_path, **{"train.init_from": str(hf / "gpt2"), "data.corpus": str(text), "data.seq_len": 128,
                               "train.max_steps": 2, "train.batch_size": 2, "train.eval_tokens": 256,
                               "model.position.max_len": 128, "model.pattern.name": "sliding_window",
                               "model.pattern.params": {"window": 16}})
    try:
        assert tr.spec.pattern.name == "sliding_window" and tr.spec.position.max_len == 128
        note = next(n for n in tr.notes if n.startswith("init from"))
        assert "extended position.table.weight 32 -> 128 rows" in note and "new: none" in note
        result = tr.fit()
    finally:
        tr.close()
    assert result["val_bpc"] is not None


@pytest.mark.parametrize("over, match", [
    ({"train.lora": {"rank": 0}}, "train.lora.rank"),
    ({"train.lora": {"size": 2}}, "unknown train.lora key"),
    ({"train.lora": {"targets": []}}, "train.lora.targets"),
    ({"train.init_from": ""}, "train.init_from"),
])
def test_settings_are_refused_in_one_line(over, match):
    with pytest.raises((ValueError, TypeError), match=match):
        load(None, {**RUN, "train.max_steps": 1, **over})
