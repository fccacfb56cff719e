"""Data: vocabularies, corpora, MNIST, batching, synthetic tasks, downloads.

Data files are read from a directory the user names (`--data-dir`), else
`$TFAMILY_DATA`, else the per-user cache (see `paths`); nothing is ever
shipped in the repository.
"""
from __future__ import annotations

import importlib

# name -> the submodule defining it, imported on first use: batching and synthetic import torch,
# which `tfamily train --help` and `tfamily download` (through tfamily.data.*) do without.
_LAZY = {
    "EvalBatches": "batching", "RandomWindows": "batching", "StreamBatches": "batching", "eval_batches": "batching",
    "CORPORA": "corpora", "Corpus": "corpora", "clear_corpus_cache": "corpora", "load_corpus": "corpora",
    "DATASETS": "download", "ChecksumError": "download", "Dataset": "download", "md5_file": "download",
    "verify_file": "download",
    "MnistSplit": "mnist", "load_mnist_t10k": "mnist", "read_idx": "mnist", "read_idx_images": "mnist",
    "read_idx_labels": "mnist",
    "DataNotFoundError": "paths", "cache_dir": "paths", "find_file": "paths", "resolve_data_dir": "paths",
    "search_dirs": "paths",
    "TASKS": "synthetic", "Batch": "synthetic", "listops_eval": "synthetic", "make_task": "synthetic",
    "ByteVocab": "vocab", "CharVocab": "vocab", "vocab_from_json": "vocab",
}
__all__ = sorted({*_LAZY, "download_dataset"})


def __getattr__(name: str):
    # The function is exported as `download_dataset` so that `tfamily.data.download` stays the
    # module (a same-named attribute would shadow it for `import ... as`).
    if name == "download_dataset":
        return importlib.import_module(f"{__name__}.download").download
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
