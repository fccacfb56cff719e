"""The GCIDE dictionary (``gcide.txt.gz``, dictd text) as reverse-dictionary pairs.

A reverse dictionary reads a definition and names the word (Hill et al. 2016, "Learning to
Understand Phrases by Embedding the Dictionary"); here both sides are characters, so it is a
sequence-to-sequence task for the encoder-decoders: source = one sense's definition, target =
its headword.

The file's layout (dictd's text export of GCIDE 0.48): an entry starts at column 0 with
``Headword \\Pro*nun"ci*a*tion\\ ..., pos. [etymology]``; the bracketed etymology may run on
over indented lines. Senses follow, indented by 3 spaces, numbered (``   1. To act upon; ...``,
continued at 6 spaces) or not (one sense); each ends with its source tag (``[1913 Webster]``,
``[WordNet 1.5]``) or a blank line. Quotations (indented 9+ spaces), ``Syn:`` and ``Note:``
paragraphs are not senses. Any other column-0 line (the licence preamble) ends an entry.

Cleaning, in order (deterministic): drop bracketed tags and markup (``[Obs.]``, ``[a^]``), keep
the text of ``{cross refs}``, cut at a citation (``--Milton.``), at a usage example (``; as, an
affected equation``) and at a quotation mark (examples quote the headword); lowercase; collapse
spaces. A pair is kept when the definition has ``min_def_len..max_def_len`` characters of
``ALPHABET``, the headword ``1..max_word_len`` characters of letters, space, ``'`` and ``-``,
and the definition does not contain the headword as a word (a leak), nor starts with ``see`` or
``same as`` (a pointer to another entry). Compounds' sub-entries (``{Meadow hen} (Zool.), ...``)
are not senses of the headword. ``senses='all'`` keeps
every sense of a headword, ``'first'`` only the first; identical pairs are kept once.

Splits are by headword (no headword in two splits): the sorted distinct headwords are shuffled
by ``split_seed`` and cut 90% / 5% / 5% (train / valid / test), every split at least one.
"""
from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..base.numbers import check_int
from .paths import find_file

__all__ = ["ALPHABET", "GCIDE_FILE", "Pair", "ReverseDictionary", "parse_gcide", "clean_definition",
           "split_by_headword", "load_reverse_dictionary"]

GCIDE_FILE = "gcide.txt.gz"
# Every character a kept pair may hold; a fixed alphabet makes the vocabulary independent of
# which file (or which part of it) was read.
ALPHABET = " '(),-.:;0123456789abcdefghijklmnopqrstuvwxyz"
SPLITS = ("train", "valid", "test")
SENSES = ("all", "first")

_HEADER = re.compile(r"^(\S[^\\]*?) \\[^\\]*\\")
_NUMBERED = re.compile(r"^\d+\.\s+|^\([a-z]\)\s+")
# "[1913 Webster]", "[WordNet 1.5]": a sense's source tag ends it (a line may run on past the tag
# into the next headword, "[1913 Webster] Stipulaceous", and a sense's own "[Obs.]" line adds nothing).
_SOURCE_TAG = re.compile(r"^\[[^\]]*\]")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_CITATION = re.compile(r"--(?=[A-Z\"'(])")
_EXAMPLE = re.compile(r";\s*as,|;\s*e\. ?g\.,|\"")
_WORD_OK = re.compile(r"[a-z][a-z' -]*")
_SKIP_PARAGRAPH = ("Syn:", "Note:", "Usage:")
_POINTER = ("see ", "same as ")  # a pointer to another entry, not a definition
_NON_LETTER = re.compile(r"[^a-z'-]+")

Pair = tuple[str, str]  # (definition, headword)


def _depth(text: str) -> int:
    return text.count("[") + text.count("(") - text.count("]") - text.count(")")


def clean_definition(text: str) -> str:
    """One sense's raw text -> the cleaned, lowercased definition ('' when nothing is left)."""
    while True:  # innermost brackets first: "[OE. aferen, AS. [=a]f?ran.]" goes whole
        stripped = _BRACKETS.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    text = text.replace("{", "").replace("}", "")
    for cut in (_CITATION, _EXAMPLE):
        m = cut.search(text)
        if m:
            text = text[:m.start()]
    text = " ".join(text.lower().split())
    return text.rstrip(" ;,:-")


def _senses(body: list[str]) -> list[str]:
    """The raw text of each sense in an entry's indented lines (header continuation removed)."""
    senses, current, skipping = [], None, False
    for line in body:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped or _SOURCE_TAG.match(stripped):
            if current is not None:
                senses.append(" ".join(current))
            current, skipping = None, False if not stripped else skipping
            continue
        if indent >= 9 or skipping:  # a quotation, or the rest of a Syn:/Note: paragraph
            continue
        if stripped.startswith(_SKIP_PARAGRAPH):
            if current is not None:
                senses.append(" ".join(current))
            current, skipping = None, True
            continue
        numbered = _NUMBERED.match(stripped) is not None
        if current is None or (indent == 3 and numbered):
            if current is not None:
                senses.append(" ".join(current))
            current = [_NUMBERED.sub("", stripped)]
        else:  # a sense runs on (at 6 spaces when numbered, at 3 when not)
            current.append(stripped)
    if current is not None:
        senses.append(" ".join(current))
    return senses


def _entries(lines):
    """(headword, indented lines after the header) per entry."""
    head, body, depth = None, [], 0
    for raw in lines:
        line = raw.rstrip("\n").replace("\t", "        ")
        if line and not line[0].isspace():
            if head is not None:
                yield head, body
            m = _HEADER.match(line)
            head, body, depth = (m.group(1), [], _depth(line[m.end():])) if m else (None, [], 0)
            continue
        if head is None:
            continue
        if depth > 0:  # the header's etymology or pronunciation runs on
            depth += _depth(line)
            continue
        body.append(line)
    if head is not None:
        yield head, body


def parse_gcide(lines, *, max_def_len: int = 128, min_def_len: int = 8, max_word_len: int = 24,
                senses: str = "all") -> list[Pair]:
    """(definition, headword) pairs of the dictionary text ``lines`` (an iterable of str), in file
    order, cleaned and filtered as the module docstring says."""
    _check_params(max_def_len, min_def_len, max_word_len, senses)
    allowed = set(ALPHABET)
    pairs, seen, first_taken = [], set(), set()
    for head, body in _entries(lines):
        word = " ".join(head.lower().split())
        if not (len(word) <= max_word_len and _WORD_OK.fullmatch(word)):
            continue
        for raw in _senses(body):
            if senses == "first" and word in first_taken:
                break
            if raw.startswith("{"):  # "{Meadow hen} (Zool.), ...": a compound's sub-entry, not this word
                continue
            d = clean_definition(raw)
            if not (min_def_len <= len(d) <= max_def_len) or not set(d) <= allowed or d.startswith(_POINTER):
                continue
            if f" {word} " in " " + _NON_LETTER.sub(" ", d) + " ":  # the definition names its headword
                continue
            first_taken.add(word)
            if (d, word) not in seen:
                seen.add((d, word))
                pairs.append((d, word))
    return pairs


def _check_params(max_def_len, min_def_len, max_word_len, senses) -> None:
    for name, v in (("max_def_len", max_def_len), ("min_def_len", min_def_len), ("max_word_len", max_word_len)):
        check_int(f"reverse_dictionary: {name}", v, 1)
    if min_def_len > max_def_len:
        raise ValueError(f"reverse_dictionary: min_def_len={min_def_len} is larger than max_def_len="
                         f"{max_def_len}; make min_def_len <= max_def_len")
    if senses not in SENSES:
        raise ValueError(f"reverse_dictionary: senses={senses!r} is not valid; choose one of {', '.join(SENSES)}")


def split_by_headword(pairs: list[Pair], seed: int = 0, fractions=(0.9, 0.05, 0.05)) -> dict[str, list[Pair]]:
    """{'train', 'valid', 'test'} -> pairs, cut by headword: a seeded shuffle of the sorted
    distinct headwords, so a headword's senses all land in one split."""
    check_int("reverse_dictionary: split_seed", seed, 0)
    words = sorted({w for _, w in pairs})
    if len(words) < 3:
        raise ValueError(f"reverse_dictionary: {len(words)} distinct headword(s) survive the filters; three splits "
                         f"need at least 3 (raise max_def_len / max_word_len, or read a larger dictionary)")
    order = np.random.default_rng(seed).permutation(len(words))
    n_valid = max(1, int(len(words) * fractions[1]))
    n_test = max(1, int(len(words) * fractions[2]))
    n_train = len(words) - n_valid - n_test
    which = {}
    for rank, i in enumerate(order.tolist()):
        which[words[i]] = "train" if rank < n_train else "valid" if rank < n_train + n_valid else "test"
    out = {s: [] for s in SPLITS}
    for p in pairs:
        out[which[p[1]]].append(p)
    return out


@dataclass(frozen=True, eq=False)
class ReverseDictionary:
    """The pairs of each split and the file they came from."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    path: Path | None = None

    def split(self, which: str) -> list[Pair]:
        table = {"train": self.train, "valid": self.valid, "val": self.valid, "test": self.test}
        if which not in table:
            raise ValueError(f"unknown split {which!r}; choose one of 'train', 'valid' (or 'val'), 'test'")
        return table[which]


_CACHE: dict[tuple, ReverseDictionary] = {}


def load_reverse_dictionary(data_dir: str | os.PathLike | None = None, *, path: str | os.PathLike | None = None,
                            split_seed: int = 0, **params) -> ReverseDictionary:
    """The GCIDE reverse dictionary from ``path`` (a gzip or plain dictd text file), else
    ``gcide.txt.gz`` in the data directory (``data_dir`` / $TFAMILY_DATA / the user cache; a
    missing file raises DataNotFoundError naming every path tried). Parsed once per process."""
    file = Path(path).expanduser() if path is not None else find_file(GCIDE_FILE, data_dir)
    if not file.is_file():
        raise FileNotFoundError(f"reverse_dictionary: {file} is not a file; pass a GCIDE text file "
                                f"(data.task_params.path) or put {GCIDE_FILE} in the data directory")
    st = file.stat()
    key = (str(file.resolve()), st.st_size, st.st_mtime_ns, split_seed, tuple(sorted(params.items())))
    if key not in _CACHE:
        opener = gzip.open if file.suffix == ".gz" else open
        try:
            with opener(file, "rt", encoding="utf-8", errors="replace") as f:
                pairs = parse_gcide(f, **params)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise ValueError(f"reverse_dictionary: {file} is not a readable gzip file ({e}): it is corrupt or "
                             f"truncated; replace it with a complete {GCIDE_FILE} (or a plain-text GCIDE file)") from e
        parts = split_by_headword(pairs, split_seed)
        _CACHE[key] = ReverseDictionary(parts["train"], parts["valid"], parts["test"], file)
    return _CACHE[key]
