import hashlib
import os
import urllib.error
import zipfile

import pytest

from tfamily.data import download as dl
from tfamily.data.download import DATASETS, ChecksumError, Dataset, download, md5_file, verify_file
from tfamily.data.sources import GCIDE_TEXT_MD5, OFFLINE_FILES

CONTENT = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50


def make_zip(path, member, content):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, content)
    return path


def leftovers(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".part")]


@pytest.fixture
def served(tmp_path):
    """A zip made by the test, served through a file:// URL."""
    archive = make_zip(tmp_path / "fake.zip", "fake.txt", CONTENT)
    return archive.as_uri()


def test_zip_download_verifies_and_installs(tmp_path, monkeypatch, served):
    md5 = hashlib.md5(CONTENT).hexdigest()
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", md5, member="fake.txt", size=len(CONTENT)))
    target = tmp_path / "data"
    path = download("fake", target, progress=False)
    assert path == target / "fake.txt"
    assert path.read_bytes() == CONTENT
    assert leftovers(target) == []

    # Present now: a second call must not touch the network (or the URL) at all.
    def no_fetch(url):
        raise AssertionError("fetched although the file was present")

    monkeypatch.setattr(dl, "_open_url", no_fetch)
    assert download("fake", target, progress=False) == path


def test_plain_file_download(tmp_path, monkeypatch):
    src = tmp_path / "input.txt"
    src.write_bytes(CONTENT)
    monkeypatch.setitem(DATASETS, "plain", Dataset(src.as_uri(), "plain.txt", hashlib.md5(CONTENT).hexdigest()))
    path = download("plain", tmp_path / "data", progress=False)
    assert path.read_bytes() == CONTENT


def test_checksum_mismatch_names_expected_and_got_and_leaves_nothing(tmp_path, monkeypatch, served):
    wrong = "0" * 32
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", wrong, member="fake.txt"))
    target = tmp_path / "data"
    with pytest.raises(ChecksumError) as info:
        download("fake", target, progress=False)
    msg = str(info.value)
    assert wrong in msg and hashlib.md5(CONTENT).hexdigest() in msg
    assert "expected" in msg and "got" in msg
    assert list(target.iterdir()) == []


def test_corrupted_archive_raises_and_leaves_nothing(tmp_path, monkeypatch):
    good = make_zip(tmp_path / "good.zip", "fake.txt", CONTENT).read_bytes()
    bad = tmp_path / "bad.zip"
    bad.write_bytes(good[: len(good) // 2])  # truncated: no central directory
    monkeypatch.setitem(DATASETS, "fake", Dataset(bad.as_uri(), "fake.txt", None, member="fake.txt"))
    target = tmp_path / "data"
    with pytest.raises(ChecksumError, match="zip"):
        download("fake", target, progress=False)
    assert list(target.iterdir()) == []


def test_size_checked_when_no_md5(tmp_path, monkeypatch, served):
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", None, member="fake.txt", size=100_000_000))
    with pytest.raises(ChecksumError, match=f"expected 100000000 bytes, got {len(CONTENT)} bytes"):
        download("fake", tmp_path / "data", progress=False)
    assert list((tmp_path / "data").iterdir()) == []


def test_missing_member_is_named(tmp_path, monkeypatch, served):
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", None, member="enwik8"))
    with pytest.raises(ValueError, match="'enwik8'.*fake.txt"):
        download("fake", tmp_path / "data", progress=False)
    assert leftovers(tmp_path / "data") == []


def test_unreachable_url_raises_and_leaves_nothing(tmp_path, monkeypatch):
    url = (tmp_path / "does-not-exist.zip").as_uri()
    monkeypatch.setitem(DATASETS, "fake", Dataset(url, "fake.txt", None, member="fake.txt"))
    with pytest.raises(urllib.error.URLError):
        download("fake", tmp_path / "data", progress=False)
    assert list((tmp_path / "data").iterdir()) == []


def test_unknown_dataset_lists_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="tinyshakespeare"):
        download("nope", tmp_path)


def test_registry_has_the_canonical_sources():
    assert DATASETS["tinyshakespeare"].md5 == "6fb458f1232090904fb40fe944165e91"
    assert DATASETS["enwik8"] == Dataset(
        "http://mattmahoney.net/dc/enwik8.zip", "enwik8", "a1fa5ffddb56f4953e226637dabbb36a", "enwik8", 100_000_000
    )
    assert DATASETS["text8"].url == "http://mattmahoney.net/dc/text8.zip"
    assert DATASETS["text8"].size == 100_000_000


@pytest.mark.parametrize("how", ["read_only", "cannot_create"])
def test_default_target_falls_back_to_cache_when_data_dir_unwritable(tmp_path, monkeypatch, served, how):
    # Root may write anywhere, so a read-only directory is simulated through os.access
    # (what download consults); a directory under a regular file cannot be created by anyone.
    if how == "read_only":
        target = tmp_path / "ro"
        target.mkdir()
        real_access = os.access
        monkeypatch.setattr(dl.os, "access", lambda p, mode: False if os.fspath(p) == os.fspath(target)
                            else real_access(p, mode))
    else:
        (tmp_path / "a_file").write_text("x")
        target = tmp_path / "a_file" / "data"
    monkeypatch.setenv("TFAMILY_DATA", str(target))
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", None, member="fake.txt"))
    path = download("fake", progress=False)
    assert path.parent == dl.cache_dir()
    assert not (target / "fake.txt").exists()


def test_cli_main(tmp_path, monkeypatch, served, capsys):
    monkeypatch.setitem(DATASETS, "fake", Dataset(served, "fake.txt", None, member="fake.txt"))
    from tfamily.cli import main
    assert main(["download", "fake", "--data-dir", str(tmp_path / "d"), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "d" / "fake.txt")
    assert main(["download", "nope"]) == 2
    assert "unknown dataset" in capsys.readouterr().err


def test_verify_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(CONTENT)
    verify_file(p, md5=hashlib.md5(CONTENT).hexdigest(), size=len(CONTENT))
    with pytest.raises(ChecksumError, match="md5"):
        verify_file(p, md5="f" * 32)
    with pytest.raises(ChecksumError, match="size"):
        verify_file(p, size=1)


@pytest.mark.parametrize("name", ["tinyshakespeare.txt", "kjv.txt", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"])
def test_offline_files_match_published_md5(shared_data, name):
    assert md5_file(shared_data(name)) == OFFLINE_FILES[name][0]


def test_gcide_text_md5(shared_data):
    assert md5_file(shared_data("gcide.txt.gz"), gunzip=True) == GCIDE_TEXT_MD5


def test_checksum_error_survives_pickling():
    import pickle

    err = ChecksumError("f", "md5", "a" * 32, "b" * 32, " note")
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and (again.expected, again.got) == (err.expected, err.got)
