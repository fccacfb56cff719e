"""`tfamily convert`: a Hugging Face directory becomes a run that `tfamily generate` and
`tfamily eval` read; the refusals are one line each and write nothing."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily import cli
from tfamily.pretrained import PretrainedError, from_pretrained

from .conftest import hf_greedy, save_hf

CHARS = "abcdefghijklmnopqrstuvwxyz"
CONFIG = dict(vocab_size=len(CHARS), n_positions=32, n_embd=32, n_layer=2, n_head=4)


def _tokenizer(path) -> None:
    """A character tokenizer (one BPE token per letter, no merges) as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(CHARS)}, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture
def hf_dir(tmp_path):
    d = tmp_path / "hf"
    hf = save_hf(d, "GPT2LMHeadModel", "GPT2Config", **CONFIG)
    _tokenizer(d)
    return d, hf


def test_convert_then_generate_greedy_matches_the_peer(hf_dir, tmp_path, capsys):
    d, hf = hf_dir
    out = tmp_path / "run"
    assert cli.main(["convert", str(d), "--out", str(out), "--seq-len", "32"]) == 0
    meta = json.loads(next((out / "checkpoints").glob("step-*/meta.json")).read_text())
    assert meta["spec"]["member"] == "gpt2" and meta["vocab"]["type"] == "tokenizer"
    capsys.readouterr()
    assert cli.main(["generate", str(out), "--prompt", "abc", "--tokens", "8", "--greedy"]) == 0
    text = capsys.readouterr().out.strip()
    want = hf_greedy(hf, torch.tensor([[0, 1, 2]]), 8)[0]
    assert text == "".join(CHARS[i] for i in want)


def _error(capsys, *argv) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_not_a_checkpoint_and_missing_weights(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    assert "no config.json" in _error(capsys, "convert", str(tmp_path / "empty"), "--out", str(out))
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert "no model.safetensors" in _error(capsys, "convert", str(tmp_path / "empty"), "--out", str(out))
    (tmp_path / "empty" / "pytorch_model.bin").write_bytes(b"pickle")
    err = _error(capsys, "convert", str(tmp_path / "empty"), "--out", str(out))
    assert "pickle" in err and "save_pretrained" in err
    assert not out.exists()


def test_unsupported_architecture_is_named_with_the_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet"}))
    with pytest.raises(PretrainedError, match=r"model_type 'xlnet'.*supported: gpt2, llama"):
        from_pretrained(tmp_path)


def test_unmapped_config_field_names_the_field(tmp_path):
    save_hf(tmp_path, "GPT2LMHeadModel", "GPT2Config", **CONFIG, activation_function="swish")
    with pytest.raises(PretrainedError, match=r"activation_function='swish' has no tfamily mapping; supported"):
        from_pretrained(tmp_path)


def test_shape_mismatch_and_foreign_weights(tmp_path):
    save_hf(tmp_path, "GPT2LMHeadModel", "GPT2Config", **CONFIG)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_positions": 64}))
    with pytest.raises(PretrainedError, match=r"position.table.weight has shape \(32, 32\) but config.json builds "
                                              r"\(64, 32\)"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 1}))
    with pytest.raises(PretrainedError, match=r"weights no tfamily part takes: \['h.1."):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    with pytest.raises(PretrainedError, match=r"asks for 3 layers but the weights hold 2 \(h.0 to h.1\)"):
        from_pretrained(tmp_path)


def test_out_must_be_new(hf_dir, tmp_path, capsys):
    d, _ = hf_dir
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    assert "not empty" in _error(capsys, "convert", str(d), "--out", str(tmp_path / "taken"))


def test_converted_run_evaluates_on_a_text_file(hf_dir, tmp_path, capsys):
    d, _ = hf_dir
    text = tmp_path / "letters.txt"
    text.write_text("".join(CHARS[(i * 7) % 26] for i in range(4000)))
    out = tmp_path / "run"
    assert cli.main(["convert", str(d), "--out", str(out), "--corpus", str(text), "--seq-len", "32"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(out), "--max-tokens", "256", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 0 and 0 < result["eval_tokens"] <= 256 and result["val_loss"] > 0
    assert result["corpus"] == str(text) and result["split"] == "val"
    # without --corpus the run has no corpus of its own: eval asks for --data, which scores the same text
    bare = tmp_path / "bare"
    assert cli.main(["convert", str(d), "--out", str(bare), "--seq-len", "32"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(bare), "--max-tokens", "256"]) == 2
    err = capsys.readouterr().err
    assert "carries no training corpus" in err and "--data CORPUS|FILE|DIR" in err and err.count("\n") == 1
    assert cli.main(["eval", str(bare), "--max-tokens", "256", "--json", "--data", str(text)]) == 0
    given = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert given["corpus"] == str(text) and given["val_loss"] == result["val_loss"]
