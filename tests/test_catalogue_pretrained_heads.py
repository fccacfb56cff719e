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


def _bert(**kw):
    from tfamily import members
    return members.get("bert")(vocab_size=31, d_model=16, heads={"n_heads": 2}, depth={"n_layers": 1},
                               position={"max_len": 16}, **kw)


def _call_types(token_types: int, types):
    import torch

    from tfamily import build
    ids = torch.randint(0, 31, (2, 6))
    return build(_bert(token_types=token_types))(ids, token_types=types(ids))


TYPE_CASES = [
    ("token_types on a model without the table",
     lambda: _call_types(0, lambda ids: ids * 0), ValueError, ["token_types given", "token_types=0", "token_types=2"]),
    ("a token type past the table", lambda: _call_types(2, lambda ids: ids * 0 + 2), ValueError,
     ["token type 2", "[0, 1]", "token_types=2"]),
    ("token types of another shape", lambda: _call_types(2, lambda ids: ids[:, :3] * 0), ValueError,
     ["(2, 3)", "(2, 6)", "one type per token"]),
    ("token_types on an encoder-decoder", lambda: __import__("tfamily").members.get("vanilla")(token_types=2),
     ValueError, ["token_types=2", "encoder_decoder", "set token_types=0"]),
    ("a negative token_types", lambda: _bert(token_types=-1), ValueError, ["token_types", "-1"]),
]


@pytest.mark.parametrize("case", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_bad_token_types_are_one_line_naming_the_value_and_the_fix(case):
    _, call, exc, words = case
    with pytest.raises(exc) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("value", [0, -1, "2", True])
def test_a_type_vocab_size_without_a_mapping_is_refused_naming_it(tmp_path, value):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "type_vocab_size": value}))
    with pytest.raises(PretrainedError) as e:
        from_pretrained(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and f"type_vocab_size={value!r}" in msg and "integer >= 1" in msg, msg


def test_a_token_type_table_too_large_for_the_machine_is_refused_before_it_is_built(tmp_path):
    config = {"model_type": "bert", "type_vocab_size": 10**12, "hidden_size": 32, "num_attention_heads": 2,
              "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 50}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedError) as e:
        from_pretrained(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "cannot fit" in msg and "token_types=1000000000000" in msg, msg
