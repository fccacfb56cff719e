"""MkDocs hooks for `make docs` (named in mkdocs.yml; kept out of the installed package, and out of
the site by its ``exclude_docs``): the site is built from docs/ plus two sources that live outside it on purpose.

README.md is the repository's front page and experiments/ is the lab (kept out of docs/ by design),
yet the site should show both and check their links. No MkDocs plugin maps files from outside
docs_dir and rewrites the repository-relative links between them, hence this hook:
- README.md becomes the site's index.md (its ``docs/`` prefixes dropped);
- experiments/** joins the site under experiments/ (its README.md as the section's index.md);
- results/index.md is generated: one line per results page, its title and first sentence;
- extensions.md is generated from the registries (``tfamily.catalogue.extensions.page``): every extension
  point, its Protocol and folder, and the names registered in it;
- links from docs/ pages into ``../../experiments/`` point at the site's copy.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files


def _results_index(docs: Path) -> str:
    lines = ["# Results", "", "One page per study; each names the machine kind, the commit and the command "
             "behind its numbers.", ""]
    for page in sorted((docs / "results").glob("*.md")):
        if page.name == "index.md":
            continue
        text = page.read_text(encoding="utf-8").splitlines()
        title = next((ln.lstrip("# ").strip() for ln in text if ln.startswith("# ")), page.stem)
        lines.append(f"- [{title}]({page.name})")
    return "\n".join(lines) + "\n"


def on_files(files: Files, config) -> Files:
    docs = Path(config["docs_dir"])
    root = Path(config["config_file_path"]).parent  # the repository that holds mkdocs.yml
    files.append(File.generated(config, "index.md", abs_src_path=str(root / "README.md")))
    files.append(File.generated(config, "results/index.md", content=_results_index(docs)))
    from tfamily.catalogue import extensions  # the library itself, for its registries (the hook runs in its environment)
    files.append(File.generated(config, "extensions.md", content=extensions.page()))
    lab = root / "experiments"
    for path in sorted(p for p in lab.rglob("*") if p.is_file()):
        rel = path.relative_to(lab).as_posix()
        uri = "experiments/" + ("index.md" if rel == "README.md" else rel)
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


_README_LINKS = [(re.compile(r"\]\(docs/results/\)"), "](results/index.md)"),
                 (re.compile(r"\]\(experiments/\)"), "](experiments/index.md)"),
                 (re.compile(r"\]\(docs/"), "]("),
                 (re.compile(r"\]\(experiments/"), "](experiments/")]


def on_page_markdown(markdown: str, page, config, files) -> str:
    uri = page.file.src_uri
    if uri == "index.md":
        for pattern, repl in _README_LINKS:
            markdown = pattern.sub(repl, markdown)
    elif uri.startswith("experiments/"):
        # the lab links to docs/ pages by repository path; the site serves docs/ at its root
        markdown = re.sub(r"\]\(((?:\.\./)+)docs/results/\)", r"](\1results/index.md)", markdown)
        markdown = re.sub(r"\]\(((?:\.\./)+)docs/", r"](\1", markdown)
    else:
        # docs/<section>/page.md -> ../../experiments/ is the repository's lab; the site keeps it one level up
        markdown = markdown.replace("](../../experiments/", "](../experiments/")
    return markdown
