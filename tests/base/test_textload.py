"""The bounded loader's own rules: typed fields, cut values, the TOML value count, caches."""
from __future__ import annotations

import pytest

from tfamily.base import textload


def test_require_checks_the_type_and_names_the_file_and_key():
    d = {"n": 3, "flag": True, "x": 1.5, "name": "a"}
    assert textload.require(d, "n", int, "f.json") == 3
    assert textload.require(d, "n", float, "f.json") == 3  # an int is a number
    assert textload.require(d, "missing", int, "f.json", 7) == 7
    with pytest.raises(ValueError, match=r"f.json field flag=True must be an integer"):
        textload.require(d, "flag", int, "f.json")  # JSON's true is not 1
    with pytest.raises(ValueError, match=r"f.json has no 'missing'"):
        textload.require(d, "missing", int, "f.json")
    with pytest.raises(ValueError, match=r"f.json must be a mapping \(with key 'n'\), got \[1\]"):
        textload.require([1], "n", int, "f.json")
    with pytest.raises(ValueError, match=r"field x=nan must be a finite number"):
        textload.number({"x": float("nan")}, "x", "f.json")


def test_values_in_error_lines_are_cut():
    assert textload.cut(list(range(10**6))) == "<a list of 1000000 items>"
    long = textload.cut("x" * 10_000)
    assert len(long) < 100 and "(10002 chars)" in long
    assert textload.cut([1, 2]) == "[1, 2]"


def test_the_toml_value_count_skips_strings_and_comments():
    text = 's = "' + "," * 200_000 + '"\n# ' + "=" * 200_000 + "\nt = '''" + "[" * 200_000 + "'''\n"
    assert textload.load_toml(text, "c.toml")["s"] == "," * 200_000
    with pytest.raises(ValueError, match="more than 100000 values"):
        textload.load_toml("x = [" + "1," * 100_001 + "]\n", "c.toml")


def test_yaml_merge_keys_are_not_duplicates():
    data = textload.load_yaml("base: &b {lr: 1}\ntrain:\n  <<: *b\n  lr: 2\n", "c.yaml")
    assert data["train"] == {"lr": 2}


def test_a_corrupt_cache_is_named_removed_and_none(tmp_path, capsys):
    f = tmp_path / "cache.json"
    assert textload.read_cache(f, str, "thing") is None  # absent: nothing said
    f.write_bytes(b"\xff")
    assert textload.read_cache(f, str, "thing") is None and not f.exists()
    assert f"cached thing {f} is corrupt" in capsys.readouterr().err
    f.write_text("ok")
    assert textload.read_cache(f, str, "thing") == "ok"


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b" " * 2048)
    with pytest.raises(ValueError, match=r"big.json is 2048 bytes.*at most 1024"):
        textload.read_json(f, limit=1024)
