"""A large prepared corpus without tokenising it again: the shards of a prepared folder repeated N times
into a new folder, with a manifest whose sizes and SHA-256 sums are the new files'.

Used for the 2 GB row of docs/results/data.md when the machine was too loaded to encode 2 GB with BPE in
the time there was (0.85 MB/s at load 11): `tfamily train` reads a prepared folder by its manifest and
its shards' sizes only, so the memory and start-up it measures do not depend on what the tokens say.

    python experiments/data/tile_prepared.py SRC_DIR DST_DIR TIMES
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path


def tile(src: Path, dst: Path, times: int) -> dict:
    m = json.loads((src / "manifest.json").read_text())
    tmp = dst.with_name(f".{dst.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, e in m["splits"].items():
        if e is None:
            continue
        for key, sha in (("file", "sha256"), ("chars_file", "chars_sha256")):
            if key not in e:
                continue
            data = (src / e[key]).read_bytes()
            h = hashlib.sha256()
            with open(tmp / e[key], "wb") as f:
                for _ in range(times):
                    f.write(data)
                    h.update(data)
            e[sha] = h.hexdigest()
        for k in ("tokens", "chars", "documents"):
            e[k] *= times
    m["tiled"] = {"from": str(src.resolve()), "times": times}
    (tmp / "manifest.json").write_text(json.dumps(m, indent=1))
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return m


if __name__ == "__main__":
    tile(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
