"""Where ``train.init_from`` starts a run from: a Hugging Face directory or a tfamily run or
checkpoint, each a reader registered in ``registry.SOURCES`` with the paths it claims. The trainer
reads its source through the registry (``train/finetune.py``) and copies the weights that still
apply (``train/transfer.py``: which, and how a longer position table is filled), so it never
imports this layer above it.
"""
from __future__ import annotations

from pathlib import Path

from ..registry import SOURCES
from ..train.transfer import POSITION_TABLE, Report, Source, longformer_fill, transfer  # noqa: F401 (this module's API)


def _is_hf(p: Path) -> bool:
    return (p / "config.json").is_file()


def read_hf(p: Path) -> Source:
    """A Hugging Face directory (config.json, model.safetensors, tokenizer.json if any)."""
    from ..data.tokenizer import read_tokenizer
    from . import from_pretrained
    model, spec = from_pretrained(p)
    tok = p / "tokenizer.json"
    vocab = read_tokenizer(tok) if tok.is_file() else None
    return Source(model, spec, vocab, p)


def read_run(p: Path) -> Source:
    """A tfamily run or checkpoint directory (LoRA adapters merged)."""
    from ..train.sample import load_trained
    if not p.exists():
        raise FileNotFoundError(f"--init-from {p} does not exist; pass a Hugging Face directory (config.json + "
                                f"model.safetensors) or a tfamily run or checkpoint directory")
    tr = load_trained(p, "cpu")
    return Source(tr.model, tr.spec, tr.vocab, tr.path)


SOURCES.register("huggingface", read_hf, claims=_is_hf)
SOURCES.register("run", read_run, claims=lambda p: not _is_hf(p))


def load_source(path: str | Path) -> Source:
    """The checkpoint at ``path`` (read once per process for the same path)."""
    from ..train.finetune import source
    return source(path)
