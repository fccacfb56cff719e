"""Fixtures for the data tests: the offline data directory and a network guard."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Tests never use the network: any socket connection fails loudly."""

    def refuse(*args, **kwargs):
        raise RuntimeError("tests must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Point the per-user cache at a temporary directory so tests never touch ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def _shared_data_dir() -> tuple[Path | None, bool]:
    """(directory, named_by_env): $TFAMILY_DATA, else ../shared/data beside the repository."""
    env = os.environ.get("TFAMILY_DATA")
    if env:
        return Path(env), True
    default = REPO.parent / "shared" / "data"
    return (default if default.is_dir() else None), False


@pytest.fixture(scope="session")
def shared_data():
    """Return a function `need(filename) -> Path` for real offline data files.

    The suite tests on the real data (`make test` points TFAMILY_DATA at
    ../shared/data), so a missing file fails the test, naming where it looked.
    """
    directory, from_env = _shared_data_dir()

    def need(filename: str) -> Path:
        if directory is None:
            pytest.fail(f"{filename}: no data directory; set TFAMILY_DATA to the shared data directory "
                        f"(or put it at {REPO.parent / 'shared' / 'data'})")
        path = directory / filename
        if not path.is_file():
            where = f"TFAMILY_DATA={directory}" if from_env else str(directory)
            pytest.fail(f"{filename} is missing from {where}")
        return path

    return need
