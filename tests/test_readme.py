"""README.md cannot go stale: every ``bash`` and ``python`` block in it runs here at a tiny size.

Convention (stated at the end of the README): a fenced block preceded by the line
``<!-- readme-test: skip (reason) -->`` is not run; it is kept for set-up commands (``make``,
``pip``). Every other ``bash`` line must be a ``tfamily`` command: it runs in-process through
``tfamily.cli.main`` in a scratch directory holding ``my_text.txt``, with tiny sizes appended
(later ``key=value`` overrides and flags win). The member table's commands run the same way, the
other ``tfamily ...`` commands quoted in the README are parsed by the CLI's own parser, every relative
link of the README and of docs/results/ resolves, and the library never imports experiments/.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from tfamily.cli import main, make_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SKIP = re.compile(r"<!-- readme-test: skip \(.+\) -->")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)

# appended to every `tfamily train` line: a one-layer model, two steps, a short evaluation
TINY_TRAIN = ["model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1", "data.seq_len=64",
              "train.batch_size=2", "train.threads=1", "train.eval_tokens=512", "train.eval_batch_size=4",
              "--steps", "2", "--precision", "fp32"]
TINY = {"train": TINY_TRAIN, "generate": ["--tokens", "8"], "eval": ["--max-tokens", "512"]}


def blocks(text: str = README) -> list[tuple[str, str, bool]]:
    """(language, body, skipped) of every fenced block."""
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip().splitlines()
        out.append((m.group(1), m.group(2), bool(before and SKIP.fullmatch(before[-1].strip()))))
    return out


def commands(body: str) -> list[list[str]]:
    """The shell lines of a block as argv lists, continuation lines joined and comments dropped."""
    return [argv for line in body.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))]


def tiny(argv: list[str]) -> list[str]:
    assert argv[0] == "tfamily", f"README shell lines must be tfamily commands (or be skipped): {argv}"
    argv = argv[1:]
    if argv[0] == "train" and not any(a.startswith("data.corpus=") for a in argv):
        argv = argv + ["data.corpus=my_text.txt"]  # the members' default corpus, without the data directory
    return argv + TINY.get(argv[0], [])


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working directory with a small text file; torch's thread count restored afterwards."""
    line = "It was the best of times, it was the worst of times, it was the age of wisdom.\n"
    (tmp_path / "my_text.txt").write_text(line * 800)
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    yield tmp_path
    torch.set_num_threads(threads)


def run(argv: list[str]) -> None:
    assert main(tiny(argv)) == 0, f"exit status != 0: {' '.join(argv)}"


def test_the_convention_is_used_and_every_block_is_bash_or_python():
    found = blocks()
    assert found and all(lang in ("bash", "python") for lang, _, _ in found), [lang for lang, _, _ in found]
    skipped = [body for _, body, skip in found if skip]
    assert skipped and all(argv[0] in ("make", "pip") for body in skipped for argv in commands(body))
    assert SKIP.pattern.replace("\\", "").split("(")[0].strip() in README  # the README states it


def test_every_bash_block_runs_at_a_tiny_size(scratch):
    for lang, body, skip in blocks():
        if lang == "bash" and not skip:
            for argv in commands(body):
                run(argv)


def test_every_python_block_runs(scratch):
    for lang, body, skip in blocks():
        if lang == "python" and not skip:
            exec(compile(body, "README.md", "exec"), {"__name__": "readme"})


def member_rows() -> dict[str, str]:
    """member name -> its command, from the README's members table."""
    section = README.split("## Members", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|.*\| `(tfamily [^`]+)` \|$", section, re.M)
    return dict(rows)


def test_the_members_table_lists_every_member_and_each_command_trains(scratch):
    from tfamily import members
    rows = member_rows()
    assert sorted(rows) == sorted(members.REGISTRY)
    for name, command in rows.items():
        argv = shlex.split(command)
        assert argv[:4] == ["tfamily", "train", "--member", name], command
        run(argv)


def test_every_other_quoted_command_parses():
    quoted = re.findall(r"`(tfamily [^`]+)`", README)
    assert len(quoted) > 20
    parser = make_parser()
    for command in quoted:
        argv = shlex.split(command)[1:]
        try:
            parser.parse_args(argv[:1] if "--help" in argv else argv)
        except SystemExit as e:  # --version exits 0 after printing
            if e.code:
                pytest.fail(f"the README quotes a command the CLI refuses: {command}")


def test_links_and_paths_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to a missing {target}"
    for path in re.findall(r"`((?:nn|objectives|models|train|data|bench|repro|rl)/[\w/.]*)`", README):
        assert (ROOT / "src" / "tfamily" / path).exists(), f"README names a missing src/tfamily/{path}"
    for path in re.findall(r"`((?:src|scripts|configs|docs|experiments)/[\w/.\-]+)`", README):
        assert (ROOT / path).exists(), f"README names a missing {path}"


def test_the_library_never_imports_experiments():
    pattern = re.compile(r"^\s*(from|import)\s+experiments\b|sys\.path.*experiments", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders
