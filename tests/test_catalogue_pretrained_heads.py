"""Bad-input catalogue rows for pretrained heads: a pickled checkpoint is refused with the advice
to re-save it through the transformers class that keeps the model's head (never ``AutoModel``),
and a masked-LM directory saved without its head (``AutoModel``) is refused naming the class that
keeps it. One line each, naming the value and the fix."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", reason="the headless checkpoint is written by transformers")

from tfamily.pretrained import PretrainedError, from_pretrained  # noqa: E402

PICKLED = [("gpt2", "AutoModelForCausalLM"), ("llama", "AutoModelForCausalLM"), ("bert", "AutoModelForMaskedLM"),
           ("roberta", "AutoModelForMaskedLM"), ("t5", "AutoModelForSeq2SeqLM")]


@pytest.mark.parametrize("kind, cls", PICKLED, ids=[k for k, _ in PICKLED])
def test_a_pickled_checkpoint_is_refused_naming_the_class_that_keeps_the_head(tmp_path, kind, cls):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": kind}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(PretrainedError) as e:
        from_pretrained(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "pytorch_model.bin" in msg and "pickle" in msg
    assert f"{cls}.from_pretrained(DIR).save_pretrained(DIR)" in msg and "AutoModel." not in msg, msg


@pytest.mark.parametrize("cls, cfg", [("BertModel", "BertConfig"), ("RobertaModel", "RobertaConfig")])
def test_a_masked_lm_saved_without_its_head_is_refused_naming_the_class_that_keeps_it(tmp_path, cls, cfg):
    import transformers
    config = getattr(transformers, cfg)(vocab_size=53, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=24, max_position_embeddings=20)
    getattr(transformers, cls)(config).save_pretrained(tmp_path)
    with pytest.raises(PretrainedError) as e:
        from_pretrained(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "no masked-LM head" in msg and "AutoModel" in msg, msg
    assert "AutoModelForMaskedLM.from_pretrained(DIR).save_pretrained(DIR)" in msg, msg
