"""`make docs` builds the site strictly: every page, link and docstring reference resolves."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")


def _build(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, cwd=root)


def test_site_builds_strictly_with_readme_results_lab_and_api(tmp_path):
    r = _build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    site = tmp_path / "site"
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Transformer family" in index and 'href="results/' in index  # README as the front page
    for page in (ROOT / "docs" / "results").glob("*.md"):
        assert (site / "results" / page.stem / "index.html").is_file(), page.name
    assert (site / "experiments" / "index.html").is_file()
    api = (site / "api" / "parts" / "index.html").read_text(encoding="utf-8")
    assert "Protocol" in api and "tfamily.nn.heads.base.Heads" in api  # the API reference is generated


def test_a_broken_link_fails_the_build(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "experiments", root / "experiments")
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    (root / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs_hooks.py", root / "scripts" / "docs_hooks.py")
    shutil.copy(ROOT / "README.md", root / "README.md")
    (root / "src").symlink_to(ROOT / "src")
    arch = root / "docs" / "architecture.md"
    arch.write_text(arch.read_text(encoding="utf-8") + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    r = _build(root, tmp_path / "site")
    assert r.returncode != 0
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 1 and "no-such-page.md" in warnings[0], warnings
