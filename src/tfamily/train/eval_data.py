"""What `tfamily eval RUN` scores: the corpus the run trained on, or the one ``--data`` names (a corpus
name, a text file, a labelled CSV/JSONL for a classifier, a folder of `tfamily data prepare`), read
with the run's vocabulary, never one of its own.

A run converted from a Hugging Face directory carries no training corpus unless `tfamily convert
--corpus` gave it one, so its eval asks for ``--data``. What cannot be read with the run's vocabulary
is refused before anything is scored, in one line naming the run's vocabulary and the data's: a
prepared folder of another vocabulary, text with characters outside a character vocabulary (the
first and how many), a labelled file for a language model or a text for a classifier.
"""
from __future__ import annotations

import copy
from pathlib import Path

from ..data.corpora import CORPORA
from ..data.manifest import read_manifest
from ..data.vocab import OutsideVocabulary, vocab_from_json
from .tasks import labelled

CORPUS = "CORPUS|FILE|DIR"


def describe(vocab) -> str:
    """A vocabulary in a few words: ``char (65 characters)``, ``byte (256 values)``, ``tokenizer (50257 tokens)``."""
    unit = {"char": "characters", "byte": "values"}.get(vocab.name, "tokens")
    return f"{vocab.name} ({vocab.size} {unit})"


def scored_config(meta: dict, vocab, spec_model: str, where: Path, data: str | None) -> dict:
    """The run's saved config (``meta["config"]``) with ``data.corpus`` set to ``data``, after checking
    that the run can read it (None: the run's own corpus, which a converted run may lack)."""
    cfg = copy.deepcopy(meta["config"])
    own = cfg.get("data") or {}
    if data is None:
        if own.get("corpus") is None and own.get("task") is None:
            src = meta.get("pretrained") or "another format"
            raise ValueError(f"{where} was converted from {src} and carries no training corpus to score; pass "
                             f"--data {CORPUS} (a corpus name such as tinyshakespeare, a text file, or a folder of "
                             f"`tfamily data prepare`)")
        return cfg
    check_data(meta, vocab, spec_model, where, data, own)
    cfg["data"] = {**own, "corpus": str(data), "task": None, "task_params": {}}
    return cfg


def check_data(meta: dict, vocab, spec_model: str, where: Path, data: str, own: dict) -> None:
    """Refuse ``--data`` that the run ``where`` cannot score, naming the fix."""
    if own.get("task") is not None:
        raise ValueError(f"--data {data}: {where} was trained on data.task={own['task']}, synthetic examples with no "
                         f"text vocabulary; drop --data (eval scores the task's own held-out examples)")
    if vocab is None:
        src = meta.get("pretrained")
        if src:
            raise ValueError(f"--data {data}: {where} was converted from {src}, which has no tokenizer.json, so it has "
                             f"no vocabulary to read text with; copy the model's tokenizer.json into {src} and run "
                             f"`tfamily convert {src} --out NEW_DIR` again")
        raise ValueError(f"--data {data}: {where} has no text vocabulary; drop --data")
    named = data in CORPORA
    if not named and not Path(data).expanduser().exists():
        raise ValueError(f"--data {data}: no such file or folder, and not a corpus name "
                         f"({', '.join(sorted(CORPORA))}); pass one of those, a text file, a labelled CSV/JSONL or a folder of `tfamily data prepare`")
    if spec_model == "classifier" and not labelled.is_labelled(data):
        labels = ", ".join((meta.get("data") or {}).get("labels", [])) or "its classes"
        raise ValueError(f"--data {data} is not a labelled file, and {where} is a classifier (labels: {labels}); "
                         f"pass a CSV or JSONL with text and label columns")
    if spec_model != "classifier" and labelled.is_labelled(data):
        raise ValueError(f"--data {data} is a labelled file (text and label, for a classifier), and {where} is a "
                         f"{spec_model} language model; pass a corpus name, a text file or a prepared folder")
    folder = Path(data).expanduser()
    if not named and folder.is_dir():
        theirs = vocab_from_json(read_manifest(folder)["vocab"])
        if theirs != vocab:
            raise ValueError(f"--data {data} was prepared with the vocabulary {describe(theirs)}, and {where} reads "
                             f"{describe(vocab)}: the token ids would mean other text; {_prepare_fix(vocab, where)}")


def _prepare_fix(vocab, where: Path) -> str:
    if vocab.name == "byte":
        return "prepare the sources again with `tfamily data prepare SOURCES --vocab byte --out NEW_DIR`"
    if vocab.name == "tokenizer":
        return (f"prepare the sources again with the run's tokenizer: `tfamily data prepare SOURCES --vocab "
                f"{_run_dir(where)} --out NEW_DIR`")
    return "score the sources' text file itself (--data FILE), read with the run's characters"


def _run_dir(where: Path) -> Path:
    """The run directory of a checkpoint ``where`` (run/checkpoints/step-N), which holds tokenizer.json."""
    return where.parent.parent if where.parent.name == "checkpoints" else where


def outside(e: OutsideVocabulary, data: str, vocab) -> ValueError:
    """``--data``'s text holding characters outside the run's character vocabulary, as one line."""
    return ValueError(f"--data {data} holds {e.count:,} character{'s' if e.count != 1 else ''} outside the run's "
                      f"vocabulary {describe(vocab)}, the first {e.char!r} (U+{ord(e.char):04X}) at character "
                      f"{e.index:,}; score text written in the run's characters, or train a run with "
                      f"data.vocab=byte, which reads any text")
