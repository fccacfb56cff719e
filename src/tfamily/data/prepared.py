"""A prepared corpus (``tfamily data prepare``, ``prepare.py``) read as a ``Corpus`` whose splits are
memory maps of the shards: ``data.corpus=DIR``.

Nothing is read into memory: each split is ``np.memmap`` viewed as a tensor, so random windows gather
only their own tokens, streams and evaluation windows are views, and the process's anonymous memory
does not grow with the corpus (mapped pages are the page cache's, shared and dropped under pressure).
The loaders of ``batching.py`` take the maps as they take any token tensor, so ranks under torchrun
draw disjoint rows and a resumed run sees the batches the uninterrupted one would have.

At load the manifest is checked (its format version, its fields) and every shard's size against the
manifest's token count, which finds a missing or truncated shard at once; the SHA-256 of every shard
is compared only when asked (``load_prepared(..., verify=True)``, ``tfamily data verify DIR``), as it
reads the whole corpus.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from ..base.files import sha256
from . import subword
from .manifest import _PREPARE, MANIFEST, SPLITS, read_manifest, token_dtype
from .corpus import Corpus
from .vocab import vocab_from_json


def _check_vocab(folder: Path, m: dict, vocab) -> object:
    """The manifest's vocabulary, after checking that ``vocab`` (data.vocab or a checkpoint's) is the same."""
    own = vocab_from_json(m["vocab"])
    if vocab is None:
        return own
    if isinstance(vocab, str):
        same = vocab == m["tokenizer"] or vocab == "bpe" and m["tokenizer"] == f"bpe:{subword.DEFAULT_SIZE}"
        if not same:
            raise ValueError(f"data.vocab={vocab} does not match {folder}, prepared with {m['tokenizer']}; drop "
                             f"data.vocab (the folder's vocabulary is used) or prepare the sources again with "
                             f"--vocab {vocab}")
        return own
    if vocab != own:
        raise ValueError(f"the run's vocabulary ({vocab!r}, from its checkpoint) is not the one {folder} was "
                         f"prepared with ({own!r}, {m['tokenizer']}); train on a corpus prepared with the run's "
                         f"vocabulary (`tfamily data prepare ... --vocab RUN_OR_PREPARED_DIR`)")
    return own


def _map(path: Path, dtype: np.dtype, count: int, what: str, fix: str) -> torch.Tensor:
    """The (count,) tensor mapped from ``path``, whose size must be count * itemsize."""
    if not path.is_file():
        raise ValueError(f"{path} is missing: {what} is incomplete; {fix}")
    size, want = path.stat().st_size, count * dtype.itemsize
    if size != want:
        raise ValueError(f"{path} is {size:,} bytes but its manifest says {want:,} ({count:,} tokens of {dtype.name}): "
                         f"{'truncated' if size < want else 'not the file it describes'}; {fix}")
    if count == 0:
        return torch.zeros(0, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
    with warnings.catch_warnings():  # read-only map: nothing ever writes to a corpus
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.memmap(path, dtype=dtype, mode="r", shape=(count,)))


def load_prepared(folder: str | Path, vocab=None, verify: bool = False):
    """The prepared corpus in ``folder`` as a ``Corpus`` of memory-mapped splits (test = validation when
    it was prepared with ``--test 0``). ``vocab``: data.vocab or a checkpoint's vocabulary, which must
    be the folder's. ``verify``: compare every shard's SHA-256 with the manifest first."""
    folder = Path(folder)
    m = read_manifest(folder)
    vocab_obj = _check_vocab(folder, m, vocab)
    dtype = np.dtype(m.get("dtype", ""))  if m.get("dtype") in ("uint8", "uint16", "uint32") else None
    if dtype is None or dtype != token_dtype(vocab_obj.size):
        raise ValueError(f"{folder / MANIFEST} has dtype {m.get('dtype')!r}, not the one its {vocab_obj.size}-token "
                         f"vocabulary is stored in; prepare it again (`{_PREPARE} --force`)")
    if verify:
        bad = verify_prepared(folder, m)
        if bad:
            raise ValueError(f"{folder}: {bad[0]}; prepare it again (`{_PREPARE} --force`)")
    fix = f"prepare it again (`{_PREPARE} --force`), or copy the whole folder"
    tokens, chars = [], []
    for name in SPLITS:
        e = m["splits"][name]
        if e is None:  # no test split: the validation split stands in (as Tiny Shakespeare's does)
            tokens.append(tokens[1])
            chars.append(chars[1])
            continue
        tokens.append(_map(folder / e["file"], dtype, int(e["tokens"]), str(folder), fix))
        if name != "train" and vocab_obj.name == "tokenizer":
            if "chars_file" not in e:
                raise ValueError(f"{folder / MANIFEST} split {name} has no chars_file (characters per token); {fix}")
            chars.append(_map(folder / e["chars_file"], np.dtype(np.int32), int(e["tokens"]), str(folder), fix))
        else:
            chars.append(None)
    counts = None if vocab_obj.name != "tokenizer" else (None, chars[1], chars[2])
    return Corpus(folder.name, vocab_obj, *tokens, folder, counts=counts)


def verify_prepared(folder: str | Path, manifest: dict | None = None) -> list[str]:
    """Every shard's size and SHA-256 against the manifest; the problems found, one line each."""
    folder = Path(folder)
    m = manifest or read_manifest(folder)
    problems = []
    for name in SPLITS:
        e = m["splits"][name]
        if e is None:
            continue
        for key, sha in (("file", "sha256"), ("chars_file", "chars_sha256")):
            if key not in e:
                continue
            path = folder / e[key]
            if not path.is_file():
                problems.append(f"{path} is missing")
                continue
            digest = sha256(path)
            if digest != e.get(sha):
                problems.append(f"{path} has SHA-256 {digest[:16]}..., its manifest {str(e.get(sha))[:16]}...: "
                                f"the file changed after it was prepared")
    return problems
