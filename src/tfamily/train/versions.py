"""Checkpoint format versions: what a checkpoint's ``format_version`` means and how an older one
is read.

``meta.json`` carries ``format: 1`` (the file layout: safetensors files listed with their sizes
and hashes, meta written last) and ``format_version`` (the names inside: meta keys and tensor
names). A change of either name set bumps ``FORMAT_VERSION`` and adds to ``UPGRADES`` the step
from the previous version: a function that takes the old meta and returns it as the next
version would have written it, and may add ``renames`` ({old tensor name: new}) that
``Loaded.load_weights`` applies to the weights file, so a checkpoint is never rewritten to be
read. Checkpoints written before versioning have no ``format_version`` and read as version 1.
A version newer than this code's is refused, naming both.
"""
from __future__ import annotations

from collections.abc import Callable

FORMAT_VERSION = 1
# version v -> the function that turns a version-v meta into version v + 1
UPGRADES: dict[int, Callable[[dict], dict]] = {}


class VersionError(ValueError):
    """A checkpoint's format_version that this code cannot read."""


def upgrade(meta: dict, where: str) -> dict:
    """``meta`` as the current version reads it (unchanged when it is current)."""
    v = meta.get("format_version", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise VersionError(f"{where} has format_version {v!r}, not a version tfamily writes (integers from 1); "
                           f"the checkpoint is corrupt or was edited")
    if v > FORMAT_VERSION:
        raise VersionError(f"{where} was written as checkpoint format_version {v}, newer than this tfamily reads "
                           f"(up to {FORMAT_VERSION}); upgrade tfamily (pip install -U tfamily) to load it")
    while v < FORMAT_VERSION:
        if v not in UPGRADES:
            raise VersionError(f"{where} is checkpoint format_version {v}, which this tfamily no longer converts; "
                               f"load it with an older tfamily and save its weights again")
        meta = UPGRADES[v](dict(meta))
        v += 1
    return {**meta, "format_version": v}
