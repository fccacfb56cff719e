"""The manifest of a prepared corpus (``manifest.json`` beside its shards): its format, the names of the
splits and the token dtype, and ``read_manifest``, which checks it; shared by the writer
(``prepare.py``) and the reader (``prepared.py``).

Fields: ``format`` and ``format_version``; ``tokenizer`` (byte, char, bpe:N or tokenizer.json) and
``vocab`` (the vocabulary's JSON, as a checkpoint keeps it), ``vocab_size``, ``dtype``; ``join`` (the
text and ids that join documents, counted as one character; null for a file cut by position);
``split`` (by document or position, the shares and the seed); ``splits``: per split its ``file``,
``tokens``, ``chars``, ``documents``, ``sha256`` (and for subword vocabularies ``chars_file``,
``chars_sha256``), test null when prepared with ``--test 0``; ``sources``: path, kind, bytes,
``mtime_ns``, ``sha256``; ``settings``: what ``data prepare`` was asked.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..base.textload import number, read_json, require
from .tokenizer import TOKENIZER_BYTES

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"
FORMAT, FORMAT_VERSION = "tfamily-prepared-corpus", 1
_PREPARE = "tfamily data prepare SRC --vocab VOCAB --out DIR"


def token_dtype(size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids 0..size-1."""
    return np.dtype(np.uint8 if size <= 1 << 8 else np.uint16 if size <= 1 << 16 else np.uint32)


def read_manifest(folder: str | Path) -> dict:
    """The manifest of a prepared folder, its format and fields checked; one line naming the fix otherwise."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise FileNotFoundError(f"prepared corpus {folder} does not exist; write it with `{_PREPARE}`")
    if not path.is_file():
        raise ValueError(f"{folder} is a folder without a {MANIFEST}, not a prepared corpus; prepare it once "
                         f"with `tfamily data prepare {folder} --vocab byte --out {folder}-prepared` (or bpe:N, "
                         f"char) and set data.corpus={folder}-prepared")
    fix = f"prepare it again (`{_PREPARE} --force`)"
    m = read_json(path, dict, TOKENIZER_BYTES + (1 << 20))
    if m.get("format") != FORMAT:
        raise ValueError(f"{path} is not a prepared corpus's manifest (format {m.get('format')!r}); {fix}")
    version = require(m, "format_version", int, str(path), fix=fix)
    if version > FORMAT_VERSION:
        raise ValueError(f"{path} has format_version {version}, newer than this tfamily reads ({FORMAT_VERSION}; "
                         f"written by tfamily {m.get('tfamily')}); upgrade tfamily (pip install -U tfamily) or "
                         f"prepare the corpus again with this one")
    require(m, "vocab", dict, str(path), fix=fix)
    require(m, "tokenizer", str, str(path), fix=fix)
    splits = require(m, "splits", dict, str(path), fix=fix)
    for name in SPLITS:
        entry = require(splits, name, (dict, type(None)), f"{path} splits", fix=fix)
        if entry is None and name != "test":
            raise ValueError(f"{path} has no {name} split; {fix}")
        if entry is not None:
            require(entry, "file", str, f"{path} split {name}", fix=fix)
            for key in ("tokens", "chars"):
                if number(entry, key, f"{path} split {name}", fix=fix) < 0:
                    raise ValueError(f"{path} split {name} has {key}={entry[key]}; {fix}")
    return m
