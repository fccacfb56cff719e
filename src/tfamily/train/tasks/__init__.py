"""The kinds of work the training loop drives (see ``train/task.py`` for the protocol), and
``make_task``, which picks one from a ``data`` config."""
from __future__ import annotations

from ...settings.run import DataConfig
from ..task import Task
from . import labelled
from .reverse_dictionary import NAME as REVERSE_DICTIONARY
from .reverse_dictionary import ReverseDictionaryTask
from .seq2seq import PairTask
from .synthetic import SyntheticTask
from .text import TextTask


def make_task(cfg: DataConfig, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1,
              data_dir=None, vocab=None, objective: str | None = None, labels: list[str] | None = None) -> Task:
    """The task a ``data`` config describes, with ``batch_size`` rows per rank. A synthetic
    task for an encoder-decoder (``objective`` 'seq2seq') comes as source/target pairs, as does
    the GCIDE reverse dictionary (``data.task=reverse_dictionary``, read from ``data_dir``); a ``.csv`` or
    ``.jsonl`` corpus is a labelled text file for a classifier (``labelled.py``), whose labels must be
    among ``labels`` when given (a trained run's)."""
    kw = dict(seed=seed, rank=rank, world_size=world_size)
    if cfg.task == REVERSE_DICTIONARY:
        if objective not in (None, "seq2seq"):
            raise ValueError(f"data.task={REVERSE_DICTIONARY} gives definition -> headword pairs for an "
                             f"encoder-decoder (objective 'seq2seq'), not objective {objective!r}; train a member "
                             f"such as luong_attention, lstm_seq2seq, vanilla or universal_transformer")
        return ReverseDictionaryTask(cfg, batch_size, data_dir=data_dir, **kw)
    if cfg.task is not None:
        return (PairTask if objective == "seq2seq" else SyntheticTask)(cfg, batch_size, **kw)
    if labelled.is_labelled(cfg.corpus):  # a user's CSV/JSONL of text and label: classification
        return labelled.make(cfg, batch_size, seed=seed, vocab=vocab, labels=labels)
    if objective == "seq2seq":
        raise ValueError(f"the encoder-decoder (objective 'seq2seq') trains on source/target pairs; set "
                         f"data.task to copy, reverse or addition instead of data.corpus={cfg.corpus!r}, or pre-train it on "
                         f"the corpus with model.objective.name=span_corruption (T5's span corruption)")
    return TextTask(cfg, batch_size, data_dir=data_dir, vocab=vocab, **kw)
