"""Sort tfamily's top-level modules into packages by layer, rewriting every import.

Run once from the repository root (``python experiments/architecture/move_modules.py``); kept as
the record of what moved where. It ``git mv``s the files (and the tests that mirror them), then
rewrites imports with the AST's line spans: a relative import stays relative to the file's new
place, an absolute one stays absolute, and ``from PKG import a, b`` is split when ``a`` and ``b``
now live in different packages. Dotted names in strings and prose (``"tfamily.members_cli"``) are
rewritten textually. Prints every split so a person reads them.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

MOVES = {  # old module -> new module (a package's __init__ keeps the old name)
    **{f"tfamily.{m}": f"tfamily.base.{m}" for m in
       ("numbers", "dicts", "files", "hardware", "plotting", "options", "textload", "interrupt")},
    "tfamily.spec": "tfamily.spec", "tfamily.spec_checks": "tfamily.spec.checks",
    "tfamily.spec_choices": "tfamily.spec.words", "tfamily.checks": "tfamily.spec.part_checks",
    "tfamily.sizes": "tfamily.spec.sizes", "tfamily.variants": "tfamily.spec.variants",
    "tfamily.members": "tfamily.members", "tfamily.recipes": "tfamily.members.recipes",
    "tfamily.family": "tfamily.members.family", "tfamily.contexts": "tfamily.members.contexts",
    "tfamily.members_rnn": "tfamily.members.rnn",
    "tfamily.tour": "tfamily.catalogue.tour", "tfamily.extensions": "tfamily.catalogue.extensions",
    "tfamily.members_cli": "tfamily.catalogue.cli",
    "tfamily.export": "tfamily.export", "tfamily.export_cli": "tfamily.export.cli",
    "tfamily.compare": "tfamily.compare", "tfamily.rundiff": "tfamily.compare.rundiff",
}
PACKAGES = {"tfamily.spec", "tfamily.members", "tfamily.export", "tfamily.compare"}  # became packages
NEW_PACKAGES = {"base": "The base layer: number, option and dict helpers, bounded file reading, atomic writes,\n"
                        "plotting setup and Ctrl-C handling. Imports nothing above ``registry.py``.",
                "catalogue": "What the library offers, described: the reading tour, the extension-points page and\n"
                             "``tfamily members``."}
TESTS = {"base": ["test_numbers", "test_dicts", "test_files", "test_options", "test_textload"],
         "spec": ["test_spec", "test_spec_fuzz", "test_checks", "test_variants"],
         "members": ["test_members", "test_members_twins", "test_members_universal"],
         "catalogue": ["test_tour", "test_extensions"], "export": ["test_export"], "compare": ["test_compare"]}
SRC = Path("src")


def path_of(module: str, package: bool) -> Path:
    p = SRC / Path(*module.split("."))
    return p / "__init__.py" if package else p.with_suffix(".py")


def git_mv(a: Path, b: Path) -> None:
    b.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "mv", str(a), str(b)], check=True)


def move_files() -> dict[Path, str]:
    """Move the files; return each moved source file's new path -> its old module name."""
    old_of: dict[Path, str] = {}
    for old, new in sorted(MOVES.items(), key=lambda kv: kv[0] in PACKAGES):  # submodules first
        new_path = path_of(new, new in PACKAGES)
        git_mv(path_of(old, False), new_path)
        old_of[new_path] = old
    for name, doc in NEW_PACKAGES.items():
        (SRC / "tfamily" / name / "__init__.py").write_text(f'"""{doc}"""\n', encoding="utf-8")
        subprocess.run(["git", "add", str(SRC / "tfamily" / name / "__init__.py")], check=True)
    for folder, names in TESTS.items():
        for n in names:
            git_mv(Path("tests") / f"{n}.py", Path("tests") / folder / f"{n}.py")
    return old_of


def old_module(path: Path, old_of: dict[Path, str]) -> tuple[str, bool] | None:
    """The module name ``path`` had before the move and whether it was a package's __init__."""
    if path in old_of:
        return old_of[path], False
    if not path.is_relative_to(SRC):
        return None
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def new_module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def resolve(node: ast.ImportFrom, here: tuple[str, bool] | None) -> str:
    if not node.level:
        return node.module or ""
    mod, is_pkg = here
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative(target: str, here: tuple[str, bool]) -> tuple[int, str]:
    mod, is_pkg = here
    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
    t = target.split(".")
    common = 0
    while common < min(len(pkg), len(t)) and pkg[common] == t[common]:
        common += 1
    return len(pkg) - common + 1, ".".join(t[common:])


def mapped(module: str) -> str:
    for old in sorted(MOVES, key=len, reverse=True):
        if module == old or module.startswith(old + "."):
            return MOVES[old] + module[len(old):]
    return module


def from_line(level: int, module: str, names: list[str], absolute: bool, target: str) -> str:
    head = target if absolute else "." * level + module
    return f"from {head} import {', '.join(names)}"


def rewrite_source(path: Path, old_of: dict[Path, str]) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    here_old = old_module(path, old_of)
    here_new = new_module(path) if path.is_relative_to(SRC) else None
    lines = text.split("\n")
    edits: list[tuple[int, int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level and here_old is None:
                continue
            target = resolve(node, here_old)
            if not target.startswith("tfamily"):
                continue
            groups: dict[str, list[str]] = {}
            for a in node.names:
                sub = f"{target}.{a.name}"
                is_module = sub in MOVES
                parent = mapped(sub).rsplit(".", 1)[0] if is_module else mapped(target)
                alias = a.name if not a.asname else f"{a.name} as {a.asname}"
                if is_module and mapped(sub).rsplit(".", 1)[1] != a.name:
                    alias = f"{mapped(sub).rsplit('.', 1)[1]} as {a.asname or a.name}"
                groups.setdefault(parent, []).append(alias)
            single = len(groups) == 1 and all(" as " not in x or x in [
                (f"{a.name} as {a.asname}" if a.asname else a.name) for a in node.names] for x in next(iter(groups.values())))
            new_parent = next(iter(groups))
            if single:
                if node.level:
                    level, mod = relative(new_parent, here_new)
                    new_head = "." * level + mod
                else:
                    new_head = new_parent
                old_head = "." * node.level + (node.module or "")
                if new_head == old_head:
                    continue
                first = lines[node.lineno - 1]
                pat = re.compile(r"from\s+" + re.escape(old_head) + r"\s+import")
                new_first, n = pat.subn(f"from {new_head} import", first, count=1)
                assert n == 1, (path, node.lineno, first)
                edits.append((node.lineno, node.lineno, [new_first]))
            else:
                indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
                out = []
                for parent, names in groups.items():
                    if node.level:
                        level, mod = relative(parent, here_new)
                        out.append(indent + from_line(level, mod, names, False, parent))
                    else:
                        out.append(indent + from_line(0, "", names, True, parent))
                old = "\n".join(lines[node.lineno - 1: node.end_lineno])
                comment = re.search(r"#.*$", old)
                if comment and len(out) == 1:
                    out[0] += "  " + comment.group(0)
                print(f"{path}:{node.lineno}: {old.strip()!r} -> {out}")
                edits.append((node.lineno, node.end_lineno, out))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tfamily") and mapped(a.name) != a.name:
                    first = lines[node.lineno - 1]
                    lines[node.lineno - 1] = re.sub(r"\b" + re.escape(a.name) + r"\b", mapped(a.name), first, count=1)
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1: end] = new
    text = "\n".join(lines)
    text = rewrite_dotted(text)
    path.write_text(text, encoding="utf-8")


def rewrite_dotted(text: str) -> str:
    names = sorted((o for o, n in MOVES.items() if o != n), key=len, reverse=True)
    pat = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b(?![_a-zA-Z0-9])")
    return pat.sub(lambda m: MOVES[m.group(1)], text)


def main() -> None:
    old_of = move_files()
    for path in sorted({*Path("src").rglob("*.py"), *Path("tests").rglob("*.py"), *Path("scripts").rglob("*.py"),
                        *Path("experiments").rglob("*.py")}):
        if path.name == Path(__file__).name:
            continue
        rewrite_source(path, old_of)
    for path in [*Path("docs").rglob("*.md"), Path("README.md"), Path("mkdocs.yml"), Path("Makefile"),
                 Path("pyproject.toml"), *Path("experiments").rglob("*.sh"), *Path("experiments").rglob("*.md")]:
        if path.exists():
            text = path.read_text(encoding="utf-8")
            new = rewrite_dotted(text)
            if new != text:
                path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
