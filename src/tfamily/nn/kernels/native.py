"""The compiled CPU kernels (``csrc/``): built once per machine on first use, or by ``make``.

``torch.utils.cpp_extension`` compiles the sources with the machine's g++ and ninja into a
cache directory keyed by the sources, the torch version and the CPU's instruction-set flags
(``-march=native``: a build for an AVX512 Xeon must not load on an AVX2-only EPYC), so a
second process loads it in well under a second. Where no compiler is present, or the build
fails, one line says so on stderr and the kernels keep their pure-PyTorch paths, which compute
the same function (tests compare both). ``TFAMILY_NATIVE=0`` turns the compiled path off.

Directory: ``$TFAMILY_CACHE`` or ``~/.cache/tfamily``, then ``native/<key>``.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import threading
from pathlib import Path

import torch

from ...base.hardware import cpu_flags

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = [_CSRC / "lsh_chunks.cpp", _CSRC / "blocksparse.cpp"]
_HEADERS = [_CSRC / "common.h"]
# -fopenmp: at::parallel_for is a header template; compiled without it, its OpenMP pragma is
# ignored and every kernel runs on one thread (measured: no speed-up from 1 to 2 threads).
# -fno-trapping-math: without it GCC 12 vectorises none of the exp / mask loops (the float -> int
# conversion in exp_nonpos may trap), and they ran scalar (half of a block-sparse forward's time).
# -mprefer-vector-width: on these VMs -march=native reads an "AMD EPYC" as znver1, whose tuning keeps
# loops at 128-bit vectors, and a Xeon as a part tuned for 256-bit ones; the exp / mask loops are
# worth the widest vectors the CPU has (512 bits with AVX512F).
def _vector_width() -> str:
    return f"-mprefer-vector-width={512 if 'avx512f' in cpu_flags() else 256}"


_CFLAGS = ["-O3", "-march=native", _vector_width(), "-ffp-contract=fast", "-fno-trapping-math", "-fopenmp"]
_lock = threading.Lock()
_state: dict = {}


def _cpu_flags() -> str:
    return " ".join(sorted(cpu_flags())) or platform.processor() or platform.machine()


def build_dir() -> Path:
    key = hashlib.sha256()
    for src in _SOURCES + _HEADERS:
        key.update(src.read_bytes())
    key.update(torch.__version__.encode())
    key.update(" ".join(_CFLAGS).encode())
    key.update(_cpu_flags().encode())
    # Each checkout builds its own: the ninja file names the sources by path, so two checkouts
    # sharing one directory rebuilt it (about 17 s) every time a process of the other one started.
    key.update(str(_SOURCES[0].resolve().parent).encode())
    root = Path(os.environ.get("TFAMILY_CACHE") or Path.home() / ".cache" / "tfamily")
    return root / "native" / key.hexdigest()[:16]


def enabled() -> bool:
    return os.environ.get("TFAMILY_NATIVE", "1") not in ("0", "false", "no", "off")


def ops():
    """``torch.ops.tfamily_native``, building it on first use; None when unavailable (once, a
    one-line note on stderr) or turned off."""
    if not enabled():
        return None
    with _lock:
        if "ops" not in _state:
            _state["ops"] = _load()
    return _state["ops"]


def _load():
    why = None
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        why = "no C++ compiler (c++/g++) on PATH"
    elif shutil.which("ninja") is None:
        why = "ninja is not installed"
    if why is None:
        try:
            from torch.utils import cpp_extension

            out = build_dir()
            out.mkdir(parents=True, exist_ok=True)
            cpp_extension.load(name="tfamily_native", sources=[str(s) for s in _SOURCES], build_directory=str(out),
                               extra_cflags=_CFLAGS, extra_ldflags=["-fopenmp"],
                               is_python_module=False, verbose=False)
            return torch.ops.tfamily_native
        except Exception as exc:  # a failed build must not take the pure-PyTorch paths down with it
            why = f"build failed ({type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]})"
    print(f"tfamily: compiled CPU kernels unavailable, {why}; using the PyTorch paths "
          f"(same results, slower)", file=sys.stderr, flush=True)
    return None


def main() -> None:
    """Build now and say where (``make`` calls this during set-up)."""
    print("tfamily: compiled CPU kernels " + ("ready in " + str(build_dir()) if ops() is not None else "off"))


if __name__ == "__main__":
    main()
