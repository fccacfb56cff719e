"""`tfamily export --format hf`: tfamily models written as Hugging Face checkpoints load in
transformers with equal logits; HF -> convert -> export -> HF keeps every tensor; a spec the
peer cannot express is refused by the field's name, with nothing written."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch
import yaml

from tfamily import build, cli, members
from tfamily.export.hf import export_hf

from .conftest import save_hf, transformers

TINY = dict(vocab_size=61, d_model=32, heads={"n_heads": 4}, depth={"n_layers": 2}, position={"max_len": 32},
            dropout=0.0)
LLAMA = {"position": {"name": "rotary", "max_len": 32, "params": {"base": 500.0}}, "norm.name": "rms_norm",
         "ff": {"name": "glu", "activation": "silu", "d_ff": 48}, "bias": False, "tie_embeddings": False,
         "heads.n_kv_heads": 2}
SPECS = {
    "gpt2": members.get("gpt")(**TINY),
    "gpt2_untied": members.get("gpt")(**TINY, tie_embeddings=False),
    "llama": members.get("gpt")(**TINY).override(LLAMA),
    "mistral": members.get("gpt")(**TINY).override({**LLAMA, "pattern": {"name": "sliding_window",
                                                                          "params": {"window": 5}}}),
    "bert": members.get("bert")(**TINY, scale_embeddings=False, logit_scale=False).override({"norm.embed": True}),
}


def _model(spec):
    torch.manual_seed(0)
    model = build(spec).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a wrong mapping of them shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _load(path, encoder: bool):
    auto = transformers.AutoModelForMaskedLM if encoder else transformers.AutoModelForCausalLM
    model, info = auto.from_pretrained(path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weight
    return model.eval()


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_transformers_loads_the_export_with_equal_logits(tmp_path, kind):
    model = _model(SPECS[kind])
    summary = export_hf(model, tmp_path / "hf")
    assert summary["model_type"] == kind.split("_")[0] and summary["files"] == ["config.json", "model.safetensors"]
    hf = _load(tmp_path / "hf", SPECS[kind].model == "encoder")
    ids = torch.randint(0, 61, (2, 24))  # longer than Mistral's window
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max().item() <= 1e-4


@pytest.mark.parametrize("over, field", [
    ({"pattern": {"name": "sliding_window", "params": {"window": 8}}}, "pattern.name='sliding_window'"),
    ({"state": {"name": "xl_memory", "mem_len": 8}}, "state.name='xl_memory'"),
    ({"logit_scale": True}, "logit_scale=True"),
    ({"position": {"name": "sinusoidal", "max_len": 32}}, "position.name='sinusoidal'"),
])
def test_a_field_without_a_mapping_is_refused_by_name(tmp_path, over, field):
    model = build(SPECS["gpt2"].override(over))
    with pytest.raises(ValueError, match="no mapping") as e:
        export_hf(model, tmp_path / "hf")
    assert field in str(e.value) and "\n" not in str(e.value)
    assert os.listdir(tmp_path) == []


def test_hf_convert_export_hf_keeps_every_tensor(tmp_path, capsys):
    src = tmp_path / "src"
    hf = save_hf(src, "GPT2LMHeadModel", "GPT2Config", vocab_size=61, n_positions=32, n_embd=32, n_layer=2,
                 n_head=4)
    from tokenizers import Tokenizer, models  # a tokenizer.json travels through the run
    Tokenizer(models.BPE(vocab={chr(97 + i): i for i in range(26)}, merges=[])).save(str(src / "tokenizer.json"))
    assert cli.main(["convert", str(src), "--out", str(tmp_path / "run"), "--seq-len", "32"]) == 0
    assert cli.main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "back")]) == 0
    assert "Hugging Face gpt2 checkpoint" in capsys.readouterr().out
    back = _load(tmp_path / "back", encoder=False)
    ids = torch.randint(0, 61, (2, 20))
    with torch.no_grad():
        assert (back(ids).logits - hf(ids).logits).abs().max().item() <= 1e-4
    want, got = hf.state_dict(), back.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert (tmp_path / "back" / "tokenizer.json").read_text() == (src / "tokenizer.json").read_text()
    assert json.loads((tmp_path / "back" / "config.json").read_text())["n_embd"] == 32
    # The directory exists now: a second export refuses it, in one line.
    capsys.readouterr()
    assert cli.main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "back")]) == 2
    err = capsys.readouterr().err
    assert "exists and is not an empty directory" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["transformer_xl", "lstm_lm"])
def test_a_member_far_from_its_peer_is_refused_with_every_field_the_file_and_a_fix_that_works(name):
    from tfamily.export.hf import hf_config
    spec = members.get(name)(d_model=32, vocab_size=11, heads__n_heads=2) if name == "transformer_xl" else \
        members.get(name)(d_model=32, vocab_size=11)
    with pytest.raises(ValueError) as e:
        hf_config(spec, "runs/x/checkpoints/step-00000002/meta.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{name} (its spec in runs/x/checkpoints/step-00000002/meta.json)")
    shape = "position.name='relative'" if name == "transformer_xl" else "depth.name='lstm' (gpt2 fixes 'stack')"
    assert shape in msg and ("scale_embeddings=True (gpt2 fixes False)" in msg) == spec.scale_embeddings
    assert f"--format {'onnx or torchscript or pt2' if name == 'transformer_xl' else 'torchscript'}" in msg
    # The training overrides the message gives are all the model needs to export as gpt2.
    fix = re.search(r"train a model with (.*) to export it as gpt2$", msg).group(1).split()
    assert len(fix) >= 3 and all(f.startswith("model.") for f in fix)
    overrides = {k.removeprefix("model."): yaml.safe_load(v) for k, v in (f.split("=", 1) for f in fix)}
    assert hf_config(spec.override(overrides))[0]["model_type"] == "gpt2"
