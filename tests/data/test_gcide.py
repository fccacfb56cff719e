"""The GCIDE reverse-dictionary parser on a hand-made file in the dictionary's layout (never the
real data): which senses become pairs, how they are cleaned, and splits by headword."""
from __future__ import annotations

import gzip
import random

import pytest

from tfamily.data.gcide import (
    ALPHABET, clean_definition, load_reverse_dictionary, parse_gcide, split_by_headword,
)
from tfamily.data.paths import DataNotFoundError

SAMPLE = '''
00-database-url
   ftp://ftp.gnu.org/gnu/gcide

GCIDE is free software; you can redistribute it and/or modify it
under the terms of the GNU General Public License.

Affear \\Af*fear"\\, v. t. [OE. aferen, AS. [=a]f?ran. See
   {Afeard}.]
   To frighten. [Obs.] --Spenser.
   [1913 Webster]

Affect \\Af*fect"\\, v. t. [imp. & p. p. {Affected}; p. pr. & vb.
   n. {Affecting}.] [L. affectus, p. p. of afficere to affect by
   active agency.]
   1. To act upon; to produce an effect or change upon.
      [1913 Webster]

            As might affect the earth with cold heat. --Milton.
      [1913 Webster]

   2. To influence or move, as the feelings or passions; to
      touch.
      [1913 Webster]

   3. To make a show of; to put on a pretense of; to feign; to
      assume; as, to affect ignorance.
      [1913 Webster]

   Syn: To influence; operate; act on; concern; move; melt.
        [1913 Webster]

Affect \\Af*fect"\\ ([a^]f*f[e^]kt"), n. [L. affectus.]
   1. Affection; inclination; passion; feeling; disposition.
      [Obs.] --Shak.
      [1913 Webster]

1-dodecanol \\1-dodecanol\\ n.
   An insoluble solid alcohol with an unbranched
   paraffin chain, used to make detergents.

   Syn: lauryl alcohol
        [WordNet 1.5 +PJC]

Meadow \\Mead"ow\\, n.
   1. A tract of low land.
      [1913 Webster]

   {Meadow hen} (Zool.), the American bittern.
      [1913 Webster]

Stipula \\Stip"u*la\\, n.; pl. E. {Stipulas}. [L.,
   a stalk, stem.]
   1. (Bot.) A stipule.
      [1913 Webster]

   2. (Zool.) A newly sprouted feather.
      [1913 Webster] Stipulaceous

Louri \\Lou"ri\\, n. (Zool.)
   See {Lory}.
   [1913 Webster]

Affectingly \\Af*fect"ing*ly\\, adv.
   In an affecting manner; in a manner to excite emotions.
   [1913 Webster]

Echo \\Ech"o\\, n.
   A sound heard again; the echo of a voice.
   [1913 Webster]

Tressy \\Tress"y\\, a.
   Abounding in tresses.
   [1913 Webster]
'''

ALL = [
    ("to frighten.", "affear"),
    ("to act upon; to produce an effect or change upon.", "affect"),
    ("to influence or move, as the feelings or passions; to touch.", "affect"),
    ("to make a show of; to put on a pretense of; to feign; to assume", "affect"),
    ("affection; inclination; passion; feeling; disposition.", "affect"),
    ("a tract of low land.", "meadow"),
    ("(bot.) a stipule.", "stipula"),
    ("(zool.) a newly sprouted feather.", "stipula"),
    ("in an affecting manner; in a manner to excite emotions.", "affectingly"),
    ("abounding in tresses.", "tressy"),
]


def test_every_sense_in_file_order():
    # Dropped: the preamble, the header's run-on etymology, the quotation, Syn:, the second Affect
    # entry's "[Obs.] --Shak." line, 1-dodecanol (a digit in the headword), the {Meadow hen}
    # compound, Louri's pointer "See {Lory}.", Echo (its definition names it), and the text that
    # runs on after Stipula's source tag.
    assert parse_gcide(SAMPLE.splitlines(True)) == ALL


def test_first_sense_and_length_filters():
    first = parse_gcide(SAMPLE.splitlines(), senses="first")
    assert first == [ALL[0], ALL[1], ALL[5], ALL[6], ALL[8], ALL[9]]
    short = parse_gcide(SAMPLE.splitlines(), max_def_len=20)
    assert short == [p for p in ALL if len(p[0]) <= 20] == [ALL[0], ALL[5], ALL[6]]
    assert parse_gcide(SAMPLE.splitlines(), min_def_len=13, max_def_len=20) == [ALL[5], ALL[6]]
    assert parse_gcide(SAMPLE.splitlines(), max_word_len=6) == [p for p in ALL if len(p[1]) <= 6]
    assert all(set(d) <= set(ALPHABET) and set(w) <= set(ALPHABET) for d, w in ALL)


def test_clean_definition():
    assert clean_definition('To  {feign}; to assume; as, to affect ignorance.') == "to feign; to assume"
    assert clean_definition('Fondness; affection. [Obs.] --Hooker.') == "fondness; affection."
    assert clean_definition('A striving after. "An affectation of contempt." --Macaulay.') == "a striving after."
    assert clean_definition('[OE. aferen, AS. [=a]f?ran.] Afraid') == "afraid"
    assert clean_definition("[Obs.]") == ""


@pytest.mark.parametrize("bad, match", [({"senses": "some"}, "senses='some'"), ({"max_def_len": 0}, "max_def_len"),
                                        ({"min_def_len": 50, "max_def_len": 40}, "min_def_len=50")])
def test_bad_parameters(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_gcide([], **bad)


def _pairs(n_words: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 8))) for _ in range(n_words)})
    return [(f"definition {k} of {i}", w) for i, w in enumerate(words) for k in range(rng.randint(1, 3))]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_splits_are_disjoint_by_headword(seed):
    pairs = _pairs(200, seed)
    parts = split_by_headword(pairs, seed)
    words = {s: {w for _, w in parts[s]} for s in parts}
    assert not (words["train"] & words["valid"] or words["train"] & words["test"] or words["valid"] & words["test"])
    assert sorted(parts["train"] + parts["valid"] + parts["test"]) == sorted(pairs)
    n = len({w for _, w in pairs})
    assert len(words["valid"]) == len(words["test"]) == int(0.05 * n) and len(words["train"]) == n - 2 * int(0.05 * n)
    for s in parts:  # each split keeps the file order
        assert parts[s] == [p for p in pairs if p[1] in words[s]]
    assert split_by_headword(pairs, seed) == parts
    assert split_by_headword(pairs, seed + 100)["test"] != parts["test"]


def test_tiny_dictionaries_split_and_refuse():
    parts = split_by_headword([("a b c d", "x"), ("e f g h", "y"), ("i j k l", "z")], 0)
    assert sorted(len(v) for v in parts.values()) == [1, 1, 1]
    with pytest.raises(ValueError, match="2 distinct headword"):
        split_by_headword([("a b c d", "x"), ("e f g h", "y")], 0)
    with pytest.raises(ValueError, match="split_seed"):
        split_by_headword(_pairs(10, 0), -1)


def test_load_from_data_dir_gzip_and_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    with pytest.raises(DataNotFoundError) as err:
        load_reverse_dictionary(tmp_path)
    assert str(tmp_path / "gcide.txt.gz") in str(err.value) and "TFAMILY_DATA" in str(err.value)
    assert "--data-dir" in str(err.value)
    big = SAMPLE + "".join(f"\nWord{c} \\Word\\, n.\n   Some meaning number {c}.\n   [1913 Webster]\n"
                           for c in "abcdefghijklmnopqrstuvwxyz")
    with gzip.open(tmp_path / "gcide.txt.gz", "wt") as f:
        f.write(big)
    rd = load_reverse_dictionary(tmp_path, split_seed=3)
    expected = split_by_headword(parse_gcide(big.splitlines()), 3)
    assert (rd.train, rd.valid, rd.test) == (expected["train"], expected["valid"], expected["test"])
    assert rd.split("val") == rd.valid
    plain = tmp_path / "plain.txt"
    plain.write_text(big)
    assert load_reverse_dictionary(path=plain, split_seed=3).test == rd.test
    with pytest.raises(FileNotFoundError, match="not a file"):
        load_reverse_dictionary(path=tmp_path)
