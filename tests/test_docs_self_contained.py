"""The project explains itself: no tracked file cites a document outside the repository, and
every pointer into ``docs/`` (Markdown links, ``docs/x.md, "Section"`` in docstrings) resolves.

The outside documents were design notes kept next to the repository (``../shared/docs``:
``design.md``, ``pbg-reference.md`` with numbered sections, ``style.md``); a reader of the
project cannot follow a citation of them, so their facts live in ``docs/`` now.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()

# Citations of the outside notes: "reference 1.17", "reference§4", "design.md", "style.md",
# "pbg-reference", "../shared/docs", "the design doc".
OUTSIDE = re.compile(
    r"\breference\s*§|\breference\s+\d+(\.\d+)*\b|\bdesign\.md\b|\bstyle\.md\b|pbg-reference"
    r"|\.\./shared/|shared/docs\b|\bdesign doc\b",
    re.IGNORECASE,
)
# A docstring's pointer into the docs: docs/formats.md, "Edge files"
DOC_SECTION = re.compile(r"docs/([\w-]+\.md),\s*[\"']([^\"']+)[\"']")
# A relative Markdown link: [text](path.md#anchor) or [text](path.md)
MD_LINK = re.compile(r"\]\(([^)\s:]+?\.md)(?:#([^)\s]+))?\)")


def tracked_text_files() -> dict[str, str]:
    """Every tracked file that is UTF-8 text, by repository path (this file excluded)."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout
    files = {}
    for name in names.splitlines():
        path = REPO / name
        if name == THIS or not path.is_file():
            continue
        try:
            files[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (data, images)
    return files


def headings(markdown: str) -> dict[str, str]:
    """GitHub-style anchor -> heading text (backticks dropped) of every heading of a Markdown file."""
    found = {}
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            text = match.group(1).strip().replace("`", "")
            anchor = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            found[anchor] = text
    return found


def outside_citations(files: dict[str, str]) -> list[str]:
    """``path:line: text`` of every line citing a document outside the repository."""
    return [
        f"{name}:{number}: {line.strip()}"
        for name, text in sorted(files.items())
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE.search(line)
    ]


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    found = outside_citations(tracked_text_files())
    assert not found, "cite docs/ instead (write the fact there first):\n" + "\n".join(found)


def test_the_citation_pattern_catches_each_form() -> None:
    cited = {
        "a.py": '"""Metrics (reference 1.17)."""\nx = 1  # see reference§4\n',
        "b.md": "Read ../shared/docs/design.md and pbg-reference, style.md; see the design doc.\n",
    }
    assert len(outside_citations(cited)) == 3
    clean = {"c.md": "PBG's reference: 0.81 MRR (data/kg/README.md); the reference MRR.\n"}
    assert outside_citations(clean) == []


def test_docstring_pointers_name_an_existing_doc_and_section() -> None:
    files = tracked_text_files()
    broken = []
    for name, text in sorted(files.items()):
        for doc, section in DOC_SECTION.findall(text):
            target = files.get(f"docs/{doc}")
            if target is None or section not in headings(target).values():
                broken.append(f"{name}: docs/{doc}, {section!r}")
    assert not broken, "no such doc or section:\n" + "\n".join(broken)


def test_markdown_links_point_to_existing_files_and_sections() -> None:
    files = tracked_text_files()
    broken = []
    for name in sorted(n for n in files if n.endswith(".md")):
        for link, anchor in MD_LINK.findall(files[name]):
            target = (Path(name).parent / link).as_posix()
            target = str(Path(target)).replace("\\", "/")  # drop "./" and "a/../"
            resolved = (REPO / target).resolve().relative_to(REPO).as_posix()
            if resolved not in files:
                broken.append(f"{name}: {link} (no such file)")
            elif anchor and anchor not in headings(files[resolved]):
                broken.append(f"{name}: {link}#{anchor} (no such section)")
    assert not broken, "\n".join(broken)
