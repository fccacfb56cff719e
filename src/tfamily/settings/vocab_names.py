"""The vocabulary names a config may give (``data.vocab``), without importing a tokenizer (torch):
the settings check them when a config is read, and ``data/subword.py`` reads the BPE size."""
from __future__ import annotations

DEFAULT_SIZE = 1024
MIN_SIZE = 257  # the 256 byte tokens and at least one merge
MAX_SIZE = 1 << 20


def bpe_size(vocab: object) -> int | None:
    """N for ``'bpe:N'`` (``'bpe'``: DEFAULT_SIZE), None for any other vocabulary; a malformed
    or out-of-range size is refused in one line."""
    if not isinstance(vocab, str) or not (vocab == "bpe" or vocab.startswith("bpe:")):
        return None
    text = vocab.partition(":")[2] or str(DEFAULT_SIZE)
    if not text.isdigit() or not MIN_SIZE <= int(text) <= MAX_SIZE:
        raise ValueError(f"data.vocab={vocab!r}: the BPE size must be an integer in [{MIN_SIZE}, {MAX_SIZE}] "
                         f"(256 byte tokens plus merges); e.g. data.vocab=bpe:{DEFAULT_SIZE}")
    return int(text)
