"""Text classification from a user's file: ``data.corpus=reviews.csv`` (or ``.jsonl``) with a
``text`` and a ``label`` per row, for a ``Classifier`` (the trainer makes the model one).

- Labels: the distinct values of ``label`` (as text), sorted (numbers by value), are the class ids
  0..k-1; the list is kept in every checkpoint and checked when the run resumes.
- Split: a ``split`` column (``train``, ``val``/``validation``/``dev``, ``test``) decides each
  row's; without one, a fixed permutation (the same for every seed) holds out a tenth of the rows
  (at least one), its first half for validation and the rest for test: 90/5/5, as a text file is
  split. The training rows are the ones a held-out tenth left before the test half existed, so a run
  trained then is scored on rows it never saw; a file under 20 rows has no test row.
- Labels of a file scored by a trained run (``tfamily eval RUN --data FILE``): the run's, by id; a
  label the run was not trained on is refused.
- Tokens: the run's vocabulary (an imported tokenizer.json, a checkpoint's, else bytes), with the
  special tokens a tokenizer adds itself (BERT's ``[CLS] text [SEP]``), cut to ``data.seq_len``
  and right-padded to the longest row; ``key_padding`` is True on real tokens.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ...data import ByteVocab, CharVocab
from ...data.vocab import OutsideVocabulary
from ...data.tokenizer import TokenizerVocab
from ...base.textload import read_csv, read_jsonl
from ...settings.run import DataConfig
from .classify import ClassifyTask, Examples

SUFFIXES = (".csv", ".jsonl")
DATA_BYTES = 1 << 30  # a labelled file is held in memory whole; a larger one belongs in a streamed corpus
# A label column with more distinct values than this share of its rows is refused (from this many rows
# on): a class per row, or nearly, is an id or text column named "label", not classes.
UNIQUE_LABELS, LABEL_CHECK_ROWS = 0.5, 20
SPLITS = {"train": "train", "val": "val", "validation": "val", "dev": "val", "test": "test"}


def is_labelled(corpus: str | None) -> bool:
    return isinstance(corpus, str) and Path(corpus).suffix.lower() in SUFFIXES


def read_rows(path: Path) -> list[dict]:
    """The rows of a CSV (with a header) or JSONL file as dicts with ``text``, ``label`` and maybe ``split``."""
    if not path.is_file():
        raise FileNotFoundError(f"data.corpus={path} does not exist; pass a CSV or JSONL file with text and label")
    if path.suffix.lower() == ".csv":
        rows = read_csv(path, DATA_BYTES)
    else:
        try:
            rows = read_jsonl(path, DATA_BYTES)
        except ValueError as e:
            raise ValueError(f'{e}; write one JSON object per line, e.g. {{"text": "...", "label": "pos"}}') from None
    if not rows:
        raise ValueError(f"{path} has no data rows (" + ("an empty file or a header only" if path.suffix.lower()
                         == ".csv" else "an empty file") + "); write one row per example with a text and a label "
                         "(a CSV header 'text,label', JSONL fields text and label)")
    for i, r in enumerate(rows, 2 if path.suffix.lower() == ".csv" else 1):
        if not isinstance(r, dict) or not isinstance(r.get("text"), str) or r.get("label") in (None, ""):
            raise ValueError(f"{path} row {i} lacks a text or a label ({str(r)[:80]}); every row needs both "
                             f"(a CSV header 'text,label', JSONL fields text and label)")
        if isinstance(r["label"], (dict, list)):  # its text would become a class of its own, silently
            raise ValueError(f"{path} row {i} has label {str(r['label'])[:80]}, a JSON "
                             f"{'object' if isinstance(r['label'], dict) else 'list'}; a label is one string or "
                             f"number (e.g. \"label\": \"pos\")")
        split = r.get("split")
        if split not in (None, "") and str(split).lower() not in SPLITS:
            raise ValueError(f"{path} row {i} has split {split!r}; use one of {', '.join(SPLITS)} or leave it out")
    return rows


def _label_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def encode(vocab, text: str) -> list[int]:
    # A tokenizer.json adds its own special tokens (BERT's [CLS] ... [SEP]: the first token is what it pools).
    return (vocab.encode_special(text) if isinstance(vocab, TokenizerVocab) else vocab.encode(text)).tolist()


def assign(rows: list[dict]) -> list[str]:
    """Each row's split: its ``split`` column, else a tenth held out by a fixed permutation, its
    first half (rounded up) validation, the rest test."""
    if any(r.get("split") not in (None, "") for r in rows):
        return [SPLITS[str(r.get("split") or "train").lower()] for r in rows]
    held = np.random.default_rng(0).permutation(len(rows))[:max(1, len(rows) // 10)].tolist()
    out = ["train"] * len(rows)
    for k, i in enumerate(held):
        out[i] = "val" if k < (len(held) + 1) // 2 else "test"
    return out


def _no_rows(path: Path, split: str, rows: list[dict]) -> ValueError:
    if split == "test" and not any(r.get("split") not in (None, "") for r in rows):
        return ValueError(f"{path} has {len(rows)} rows and no split column: too few for a test split (a tenth of "
                          f"the rows is held out, half of it for test: 20 rows or more); add rows, add a split column "
                          f"marking the test rows (split=test), or score --split val")
    return ValueError(f"{path} has no {split} rows; mark some with split={split} (or drop the split column)")


def _run_labels(path: Path, rows: list[dict], labels: list[str]) -> list[str]:
    """The run's ``labels``, after checking that the file's rows hold no other."""
    known = set(labels)
    for i, r in enumerate(rows, 2 if path.suffix.lower() == ".csv" else 1):
        if str(r["label"]) not in known:
            raise ValueError(f"{path} row {i} has label {str(r['label'])[:80]!r}, which the run was not trained on "
                             f"(its labels: {', '.join(labels)}); score a file whose labels are the run's")
    return list(labels)


def _encode_all(vocab, texts: list[str], path: Path) -> list[list[int]]:
    try:
        return [encode(vocab, t) for t in texts]
    except OutsideVocabulary as e:  # the first row's error: count the whole file's
        known = set(vocab.chars)
        bad = [c for t in texts for c in t if c not in known]
        raise ValueError(f"{path} holds {len(bad):,} characters outside the run's {e.size}-character vocabulary, the "
                         f"first {bad[0]!r} (U+{ord(bad[0]):04X}); score text written in the run's characters, or "
                         f"train a run with data.vocab=byte, which reads any text") from None


def make(cfg: DataConfig, batch_size: int, *, seed: int = 0, vocab=None, labels: list[str] | None = None
         ) -> ClassifyTask:
    """The task of the labelled file ``cfg.corpus``; ``labels``: a trained run's, which the file's must be among."""
    path = Path(cfg.corpus).expanduser()
    rows = read_rows(path)
    labels_given = labels is not None
    if labels_given:
        labels = _run_labels(path, rows, labels)
    else:
        labels = sorted({str(r["label"]) for r in rows}, key=_label_key)
    if len(labels) < 2:
        raise ValueError(f"{path} has one label ({labels}); a classifier needs at least two")
    if len(rows) >= LABEL_CHECK_ROWS and len(labels) > UNIQUE_LABELS * len(rows):
        raise ValueError(f"{path}: its label column has {len(labels)} distinct values in {len(rows)} rows (e.g. "
                         f"{', '.join(labels[:3])}), under two rows per class: an id or a text column, not classes; "
                         f"put each row's class in 'label' (e.g. pos, neg)")
    if vocab is None:
        vocab = CharVocab.from_text("".join(r["text"] for r in rows)) if cfg.vocab == "char" else ByteVocab()
    ids = [row[:cfg.seq_len] or [0] for row in _encode_all(vocab, [r["text"] for r in rows], path)]
    n = max(map(len, ids))
    x = torch.zeros(len(rows), n, dtype=torch.long)
    real = torch.zeros(len(rows), n, dtype=torch.bool)
    for i, row in enumerate(ids):
        x[i, :len(row)], real[i, :len(row)] = torch.tensor(row), True
    index = {label: k for k, label in enumerate(labels)}  # list.index was quadratic: hours for 10^6 rows
    y = torch.tensor([index[str(r["label"])] for r in rows])
    split = np.array(assign(rows))
    parts = {s: torch.from_numpy(np.flatnonzero(split == s)) for s in ("train", "val", "test")}
    for s, need in (("train", 0 if labels_given else 1), (cfg.eval_split, 1)):  # a run scoring a file: no train rows
        if len(parts[s]) < need:
            raise _no_rows(path, s, rows)
    train = parts["train"]

    def draw(b: int, g: torch.Generator) -> dict:
        i = train[torch.randint(len(train), (b,), generator=g)]
        return {"x": x[i], "y": y[i], "key_padding": real[i]}

    def held(s: str) -> Examples:
        i = parts[s] if len(parts[s]) else parts["val"]
        return Examples(x[i], y[i], real[i])

    val = held(cfg.eval_split)
    return ClassifyTask(path.name, draw, val, held("test"), vocab_size=vocab.size, n_classes=len(labels),
                        batch_size=batch_size, seed=seed, vocab=vocab, labels=labels)
