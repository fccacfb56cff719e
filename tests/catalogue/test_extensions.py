"""Extension points: a toy arena task, pretrained family and attention pattern, each added in one
place (its registration), appear in the CLI, the tour and the documentation's generated page
(``tfamily.catalogue.extensions.page``), and go again when unregistered."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import save_file

import tfamily
from tfamily import cli, members, registry
from tfamily.catalogue import extensions, tour
from tfamily.members import family
from tfamily.arena import tasks
from tfamily.arena.tasks.base import HELD_OUT, Declared, classify, generator, register
from tfamily.pretrained import families, gpt2
from tfamily.pretrained.api import from_pretrained
from tfamily.export.hf import family_of
from tfamily.members.recipes import attention


# -- a toy arena task: the parity of a row of bits ----------------------------------------------------
def _parity(length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    from tfamily.train.tasks.classify import Examples

    def draw(rows: int, g: torch.Generator) -> dict:
        x = torch.randint(2, (rows, length), generator=g)
        return {"x": x, "y": x.sum(1) % 2, "key_padding": torch.ones(rows, length, dtype=torch.bool)}

    val, test = (Examples(**draw(eval_examples, generator(HELD_OUT + i, 0))) for i in (1, 2))
    return classify("toy_parity", (draw, val, test, 2, 2), batch_size=batch_size, seed=seed)


@pytest.fixture
def toy_task():
    def even(n: int) -> str | None:
        return None if n % 2 == 0 else "must be even"
    register(Declared("toy_parity", 8, _parity, checks=(even,)))
    yield
    registry.ARENA_TASKS.unregister("toy_parity")


def test_a_task_declared_once_is_in_the_cli_the_grid_and_the_docs(toy_task, tmp_path, capsys):
    assert tasks.names()[-1] == "toy_parity" and tasks.get("toy_parity").metric == "acc"
    assert tasks.DEFAULT_LENGTHS["toy_parity"] == 8 and "toy_parity" not in tasks.PAIRED
    with pytest.raises(ValueError, match="--length toy_parity=7 must be even"):
        tasks.check_length("toy_parity", 7)
    # --help lists the declared tasks and lengths (in a fresh process: the CLI may read them once, on import)
    probe = ("from tfamily.arena.tasks.base import Declared, register\n"
             "register(Declared('toy_parity', 8, print))\n"
             "from tfamily import cli\n"
             "cli.main(['arena', '--help'])\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    help_text = " ".join(done.stdout.split())
    assert "match, lm, toy_parity" in help_text and "lm=4096 toy_parity=8" in help_text, done.stderr[-2000:]
    out = tmp_path / "arena"
    assert cli.main(["arena", "--members", "gpt", "--tasks", "toy_parity", "--steps", "2", "--d-model", "16",
                     "--layers", "1", "--heads", "2", "--batch-size", "4", "--eval-examples", "8",
                     "--speed-rounds", "0", "--out", str(out)]) == 0
    row = json.loads((out / "toy_parity" / "gpt-s0" / "cell.json").read_text())
    assert (row["task"], row["metric"], row["length"], row["steps"]) == ("toy_parity", "acc", 8, 2)
    assert "toy_parity" in (out / "leaderboard.md").read_text()
    assert "| `toy_parity` | `tests.catalogue.test_extensions._parity` |" in extensions.page()


def test_an_unknown_task_lists_the_declared_ones_in_order():
    with pytest.raises(ValueError, match="tasks: listops, mnist, text, pathfinder, match, lm$"):
        tasks.check_name("nope")


# -- a toy pretrained family: GPT-2's tables under another model_type, exporting classifiers -------------
def _toy_family() -> types.ModuleType:
    toy = types.ModuleType("toy_family", "A toy family (Nobody et al. 2031): GPT-2's tables as model_type toy_gpt.")
    toy.PREFIXES, toy.IGNORE, toy.spec, toy.weights = gpt2.PREFIXES, gpt2.IGNORE, gpt2.spec, gpt2.weights
    toy.TITLE, toy.MODEL, toy.config, toy.hf_weights = "Toy", "classifier", gpt2.config, gpt2.hf_weights
    toy.exports = lambda spec: spec.model == "classifier"
    return toy


@pytest.fixture
def toy_family():
    families.register(_toy_family(), "toy_gpt", exports=True)
    yield
    registry.PRETRAINED.unregister("toy_gpt")


def test_a_family_registered_once_imports_converts_exports_and_is_documented(toy_family, tmp_path, capsys):
    config = {"model_type": "toy_gpt", "vocab_size": 26, "n_positions": 32, "n_embd": 16, "n_layer": 1, "n_head": 2}
    torch.manual_seed(0)
    model = tfamily.build(gpt2.spec(config)).eval()
    src = tmp_path / "toy"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in gpt2.hf_weights(model.spec, model.state_dict()).items()},
              str(src / "model.safetensors"))
    loaded, _ = from_pretrained(src)
    ids = torch.randint(26, (2, 9))
    torch.testing.assert_close(loaded(ids), model(ids))
    text = tmp_path / "letters.txt"
    text.write_text("abcdefghijklmnopqrstuvwxyz" * 40)
    assert cli.main(["convert", str(src), "--out", str(tmp_path / "run"), "--corpus", str(text)]) == 0
    capsys.readouterr()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({**config, "model_type": "xlnet"}))
    assert cli.main(["convert", str(tmp_path / "other"), "--out", str(tmp_path / "run2")]) == 2
    assert "supported: gpt2, llama, mistral, bert, roberta, t5, longformer, big_bird, toy_gpt" in capsys.readouterr().err
    classifier = members.gpt(model="classifier", objective={"name": "classification", "params": {"n_classes": 2}})
    assert family_of(classifier).__name__ == "toy_family"  # found through the registry, no ladder to edit
    assert family_of(members.gpt()) is gpt2
    assert "| `toy_gpt` | `toy_family` | A toy family (Nobody et al. 2031)" in extensions.page()


def test_a_family_lacking_a_protocol_name_is_refused_naming_it():
    toy = types.ModuleType("half_family")
    toy.PREFIXES, toy.IGNORE, toy.spec = (), (), gpt2.spec
    with pytest.raises(TypeError, match=r"half_family cannot be a pretrained family: it lacks \['weights'\]"):
        families.register(toy, "half")
    assert "half" not in registry.PRETRAINED


# -- a toy attention pattern: causal, every other key ---------------------------------------------------
@dataclass(frozen=True)
class EveryOther:
    """Query i sees the keys j <= i of its own parity."""
    citation = "Nobody et al. 2031, eq. 1: A = {j <= i : (i - j) mod 2 = 0}"

    name: str = "every_other"
    causal: bool = True

    def mask_mod(self, b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & ((q_idx - kv_idx) % 2 == 0)


@pytest.fixture
def toy_pattern():
    registry.PATTERNS.register("every_other", EveryOther)
    family.member("toy_member", "Nobody et al. 2031, Every Other Key", "decoder",
                  changes=(attention("pattern", {"name": "every_other"}, "Nobody et al. 2031, eq. 1"),))(lambda: None)
    yield
    family.REGISTRY.pop("toy_member")
    registry.MEMBERS.unregister("toy_member")
    registry.PATTERNS.unregister("every_other")


def test_a_pattern_registered_once_is_in_the_tour_the_cli_and_the_docs(toy_pattern, capsys):
    spec = members.gpt(pattern={"name": "every_other"}, d_model=16, depth__n_layers=1, heads__n_heads=2)
    (stop,) = [s for s in tour.tour(spec) if s.axis == "pattern"]
    assert (stop.cls, stop.citation) == (EveryOther, EveryOther.citation) and tour.cites_itself(EveryOther)
    x = torch.randint(10, (1, 6))
    tfamily.build(spec)(x)  # it builds and runs
    assert cli.main(["members", "toy_member"]) == 0
    out = capsys.readouterr().out
    assert "  pattern = every_other\n" in out and f"tests.catalogue.test_extensions.EveryOther: {EveryOther.citation}" in out
    assert f"| `every_other` | `tests.catalogue.test_extensions.EveryOther` | {EveryOther.citation} |" in extensions.page()


def test_unregistered_toys_are_gone_from_every_listing():
    page = extensions.page()
    assert "toy_parity" not in page and "toy_gpt" not in page and "every_other" not in page
    assert "toy_parity" not in tasks.names() and "toy_member" not in members.REGISTRY
