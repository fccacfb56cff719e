"""A trained run from Python, and a classifier's labels for new texts.

    import tfamily
    run = tfamily.load("runs/reviews")          # model (eval mode), vocabulary, spec
    model, vocab, spec = run
    for p in run.predict(["a fine film", "dull"]):
        print(p.label, p.probs)                 # 'pos' {'neg': 0.12, 'pos': 0.88}

A text is read as the run read its training rows (``tasks/labelled.py``): the run's vocabulary with
the special tokens a tokenizer adds itself (BERT's ``[CLS] text [SEP]``), cut to the run's
``data.seq_len``; a batch is right-padded with ``key_padding`` True on real tokens, so each text's
probabilities are the ones it gets alone (the classifier's pooling reads real tokens only).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..data.vocab import OutsideVocabulary
from ..base.numbers import check_int
from ..spec import Spec
from .device import autocast
from .eval_data import describe
from .sample import Trained, load_trained, run_precision, run_threads
from .tasks.labelled import encode


@dataclass(frozen=True)
class Prediction:
    """One text's most probable ``label`` and the probability of every label, by name."""
    label: str
    probs: dict[str, float]


@dataclass(frozen=True, eq=False)
class Run:
    """A trained run: ``model`` (in eval mode), ``vocab`` (None for a synthetic task), ``spec``;
    unpacks as ``model, vocab, spec``. ``labels``: a text classifier's class names by id."""
    model: nn.Module
    vocab: object | None
    spec: Spec
    labels: tuple[str, ...]
    path: Path
    meta: dict

    def __iter__(self) -> Iterator:
        return iter((self.model, self.vocab, self.spec))

    def predict(self, texts: str | Sequence[str], *, batch_size: int = 64,
                threads: int | None = None) -> list[Prediction]:
        """Each text's label and probabilities (a classifier trained on a labelled file only); ``texts``
        run ``batch_size`` at a time; ``threads``: torch threads (default: the run's)."""
        return predict(self, [texts] if isinstance(texts, str) else list(texts), batch_size=batch_size,
                       threads=threads)


def load(path: str | Path, device: str = "auto") -> Run:
    """The run (or checkpoint) directory ``path`` as a ``Run``: its model on ``device``, vocabulary and spec."""
    tr = load_trained(path, device)
    labels = tuple((tr.meta.get("data") or {}).get("labels") or ())
    return Run(tr.model, tr.vocab, tr.spec, labels, tr.path, tr.meta)


def check_classifier(run: Run) -> None:
    """Only a classifier trained on a labelled file labels text; say what to use instead."""
    member = (run.meta.get("config") or {}).get("member", "?")
    if run.spec.model != "classifier":
        raise ValueError(f"{run.path} ({member}) is a {run.spec.model} language model, not a classifier; "
                         f"`tfamily generate` continues text and `tfamily eval` scores it (a classifier is trained "
                         f"on a CSV or JSONL with text and label)")
    if not run.labels or run.vocab is None:
        task = ((run.meta.get("config") or {}).get("data") or {}).get("task")
        raise ValueError(f"{run.path} ({member}) classifies the synthetic task {task!r}, not text; score it with "
                         f"`tfamily eval {run.path}` (predict needs a classifier trained on a CSV or JSONL of text "
                         f"and label)")


def _ids(run: Run, texts: list[str], seq_len: int) -> list[list[int]]:
    try:
        return [encode(run.vocab, t)[:seq_len] or [0] for t in texts]
    except OutsideVocabulary as e:
        known = set(run.vocab.chars)
        bad = [(i, c) for i, t in enumerate(texts, 1) for c in t if c not in known]
        raise ValueError(f"the texts hold {len(bad):,} character{'s' if len(bad) != 1 else ''} outside the run's "
                         f"vocabulary {describe(run.vocab)}, the first {e.char!r} (U+{ord(e.char):04X}) in text "
                         f"{bad[0][0]}; write them in the run's characters, or train a run with data.vocab=byte, "
                         f"which reads any text") from None


def predict(run: Run, texts: list[str], *, batch_size: int = 64, threads: int | None = None) -> list[Prediction]:
    """``run``'s label and probabilities for each of ``texts``, ``batch_size`` texts per forward pass."""
    check_classifier(run)
    check_int("--batch-size", batch_size, 1)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"predict takes one text or a non-empty list of texts, got {str(texts)[:80]}")
    seq_len = int(run.meta["config"]["data"]["seq_len"])
    ids = _ids(run, texts, seq_len)
    dev = next(run.model.parameters()).device
    precision = run_precision(run.meta, "auto", dev)
    out: list[Prediction] = []
    with run_threads(run.meta, dev, threads), torch.no_grad():
        for i in range(0, len(ids), batch_size):
            rows = ids[i:i + batch_size]
            n = max(map(len, rows))
            x = torch.zeros(len(rows), n, dtype=torch.long)
            real = torch.zeros(len(rows), n, dtype=torch.bool)
            for r, row in enumerate(rows):
                x[r, :len(row)], real[r, :len(row)] = torch.tensor(row), True
            with autocast(dev, precision):
                logits = run.model(x.to(dev), key_padding=real.to(dev))
            probs = torch.softmax(logits.float(), -1).cpu()
            for p in probs.tolist():
                best = max(range(len(p)), key=p.__getitem__)
                out.append(Prediction(run.labels[best], dict(zip(run.labels, p))))
    return out
