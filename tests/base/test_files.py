"""files.write_atomic and files.replace_dir: the whole new content or the old, never half, and the mode
open() gives."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfamily.base import files
from tfamily.base.files import write_atomic


def test_text_and_bytes_replace_the_file_and_leave_nothing_beside_it(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("old")
    assert write_atomic(p, "naïve\n") == p and p.read_bytes() == "naïve\n".encode()
    write_atomic(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["a.json"]


def test_the_mode_is_open_s_unless_given(tmp_path):
    (tmp_path / "plain").write_text("x")
    write_atomic(tmp_path / "atomic", "x")
    assert (tmp_path / "atomic").stat().st_mode == (tmp_path / "plain").stat().st_mode
    write_atomic(tmp_path / "private", "x", mode=0o600)
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o600


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "a.json"
    p.write_text("old")

    def refuse(src, dst):
        raise OSError("no room")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="no room"):
        write_atomic(p, "new")
    assert p.read_text() == "old" and sorted(f.name for f in tmp_path.iterdir()) == ["a.json"]


def test_replace_dir_puts_the_new_folder_in_place_and_leaves_no_aside(tmp_path):
    final, tmp = tmp_path / "out", tmp_path / ".out.partial"
    final.mkdir()
    (final / "old.txt").write_text("old")
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
    assert files.replace_dir(tmp, final) == final
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing aside, no temporary left


def test_replace_dir_puts_the_old_folder_back_when_the_rename_fails(tmp_path, monkeypatch):
    final, tmp = tmp_path / "out", tmp_path / ".out.partial"
    final.mkdir()
    (final / "old.txt").write_text("old")
    tmp.mkdir()
    real = Path.rename

    def rename(self, target):
        if self == tmp:
            raise OSError("no room")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="no room"):
        files.replace_dir(tmp, final)
    assert (final / "old.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial", "out"]
