"""The wheel is the product a user installs: it must carry the named configs and work outside the
checkout. The wheel is built offline from a copy of ``pyproject.toml`` and ``src/`` (building in place
would write ``build/`` and an egg-info into the shared working tree)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "src" / "tfamily" / "configs"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    shutil.copy(ROOT / "pyproject.toml", work)
    shutil.copy(ROOT / "README.md", work)
    shutil.copytree(ROOT / "src", work / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(work / "dist"), str(work)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = (work / "dist").glob("tfamily-*.whl")
    return path


def test_the_wheel_carries_every_named_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(p.name for p in CONFIGS.iterdir() if p.suffix in (".yaml", ".toml"))
    assert {"tiny.toml", "demo.yaml"} <= set(shipped)
    missing = [n for n in shipped if f"tfamily/configs/{n}" not in names]
    assert not missing, f"configs left out of the wheel: {missing}"


def test_the_wheel_states_a_torch_range_not_a_pin(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    (torch,) = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch")]
    assert "==" not in torch and ">=" in torch and "<" in torch, torch


def test_the_wheel_carries_the_kernel_headers_the_type_marker_and_the_readme(wheel):
    import re
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    csrc = ROOT / "src" / "tfamily" / "nn" / "kernels" / "csrc"
    included = {m for src in csrc.glob("*.cpp") for m in re.findall(r'#include "([^"]+)"', src.read_text())}
    assert "common.h" in included
    missing = [h for h in sorted(included) if f"tfamily/nn/kernels/csrc/{h}" not in names]
    assert not missing, f"headers the kernels include, left out of the wheel: {missing}"
    assert "tfamily/py.typed" in names
    assert "Description-Content-Type: text/markdown" in meta
    title = (ROOT / "README.md").read_text().splitlines()[0]
    assert title in meta.split("\n\n", 1)[1], "the README is not the long description"


def test_the_wheel_declares_tokenizers(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    plain = [line for line in meta.splitlines() if line.startswith("Requires-Dist: tokenizers")]
    assert plain and all("extra ==" not in line for line in plain), plain


def _install(wheel: Path, tmp_path: Path) -> Path:
    """A venv of its own holding only the wheel; returns its python."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)
    return python


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ninja") is None or shutil.which("c++") is None, reason="needs g++ and ninja")
def test_the_compiled_kernels_build_from_an_installed_wheel(wheel, tmp_path):
    # A fresh cache, so the build really compiles from the installed sources (about 40 s on 2 cores).
    python = _install(wheel, tmp_path)
    env = {**os.environ, "TFAMILY_CACHE": str(tmp_path / "cache"), "TFAMILY_NATIVE": "1"}
    env.pop("PYTHONPATH", None)
    code = ("import tfamily.nn.kernels.native as n; assert str(n.__file__).startswith(%r), n.__file__; "
            "print('built' if n.ops() is not None else 'off')" % str(tmp_path / "venv"))
    done = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "built", done.stderr[-2000:]


@pytest.mark.slow
def test_the_installed_wheel_trains_and_demos_outside_the_checkout(wheel, tmp_path):
    # The test venv's site-packages (torch and the other dependencies) is reached through a .pth line,
    # which adds the directory without running its .pth files, so the checkout's editable install stays
    # out of sight.
    python = _install(wheel, tmp_path)
    env_dir = tmp_path / "venv"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)

    def tfamily(*argv: str) -> str:
        done = subprocess.run([str(env_dir / "bin" / "tfamily"), *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    where = subprocess.run([str(python), "-c", "import tfamily; print(tfamily.__file__)"], cwd=cwd, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(env_dir)), f"the test imported tfamily from {where}, not the wheel"
    tfamily("train", "-c", "tiny", "--steps", "2", "--out", "tiny", "train.eval_tokens=1024", "train.threads=1")
    assert (cwd / "tiny" / "result.json").is_file()
    out = tfamily("demo", "--time", "5s", "--sample-tokens", "8", "--out", "demo",
                  "train.eval_tokens=1024", "train.threads=1")
    assert "run directory: demo" in out and (cwd / "demo" / "result.json").is_file()
