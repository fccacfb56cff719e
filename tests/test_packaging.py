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


@pytest.mark.slow
def test_the_installed_wheel_trains_and_demos_outside_the_checkout(wheel, tmp_path):
    # A venv of its own holding only the wheel; the test venv's site-packages (torch and the other
    # dependencies) is reached through a .pth line, which adds the directory without running its
    # .pth files, so the editable install of the checkout stays out of sight.
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)
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
