"""The README is a front door and ``docs/`` the manual: the README stays short, its index links every
docs page (and no page that is missing), every Makefile benchmark target is documented in
``docs/benchmarks.md`` (and runs a benchmark module that exists), the README's command table
quotes every subcommand as ``pbg --help`` describes it, and every relative link of README.md,
bench/README.md and docs/*.md points at a file that exists.

Each check is a pure function over file texts, so the tests below also show that it fails when a
page, a target or a link is missing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 170

# A Markdown link or image target that is a relative path: [text](docs/x.md#anchor), ](../bench/README.md)
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+?)(?:#[^)\s]*)?\)")
# A Makefile rule of a benchmark: "bench-whole-run: $(STAMP) pbg-venv" and its first recipe line
BENCH_TARGET = re.compile(r"^(bench-[\w-]+):.*\n\t(.*)$", re.MULTILINE)
BENCH_MODULE = re.compile(r"-m bench\.(\w+)")


def docs_pages(repo: Path) -> list[str]:
    """Every page of ``docs/``, as the README links it (``docs/x.md``)."""
    return sorted(f"docs/{page.name}" for page in (repo / "docs").glob("*.md"))


def index_problems(readme: str, pages: list[str]) -> list[str]:
    """Pages the README's links leave out, and README links to ``docs/*.md`` pages that do not exist."""
    linked = {target for target in RELATIVE_LINK.findall(readme) if re.fullmatch(r"docs/[\w-]+\.md", target)}
    missing = [f"README.md does not link {page}" for page in pages if page not in linked]
    dangling = [f"README.md links {page}, which does not exist" for page in sorted(linked - set(pages))]
    return missing + dangling


def bench_targets(makefile: str) -> dict[str, str]:
    """Every ``bench-*`` target of the Makefile and the first line of its recipe."""
    return dict(BENCH_TARGET.findall(makefile))


def bench_problems(targets: dict[str, str], benchmarks_md: str, repo: Path) -> list[str]:
    """Benchmark targets docs/benchmarks.md does not name (as ``make bench-x``, with its module as
    ``bench.x``), or whose recipe does not run an existing module of ``bench/`` as ``-m bench.x``."""
    problems = []
    for target, recipe in sorted(targets.items()):
        module = BENCH_MODULE.search(recipe)
        if module is None:
            problems.append(f"Makefile {target}: runs {recipe.strip()!r}, not `$(PY) -m bench.NAME`")
            continue
        if not (repo / "bench" / f"{module.group(1)}.py").is_file():
            problems.append(f"Makefile {target}: bench/{module.group(1)}.py does not exist")
        if not re.search(rf"`make {re.escape(target)}\b", benchmarks_md):
            problems.append(f"docs/benchmarks.md does not document `make {target}`")
        if f"bench.{module.group(1)}" not in benchmarks_md:
            problems.append(f"docs/benchmarks.md does not name the module bench.{module.group(1)} ({target})")
    return problems


def broken_links(files: dict[str, str], exists: set[str]) -> list[str]:
    """``file: link`` of every relative link whose target (relative to the linking file) is not a file."""
    broken = []
    for name, text in sorted(files.items()):
        for target in RELATIVE_LINK.findall(text):
            resolved = (REPO / Path(name).parent / target).resolve()
            try:
                relative = resolved.relative_to(REPO).as_posix()
            except ValueError:
                relative = None
            if relative is None or relative not in exists:
                broken.append(f"{name}: {target}")
    return broken


def subcommand_helps() -> dict[str, str]:
    """Each ``pbg`` subcommand and the one line ``pbg --help`` shows for it."""
    from flows.cli.parser import build_parser

    parser = build_parser()
    [subcommands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {choice.dest: choice.help or "" for choice in subcommands._choices_actions}


def synopsis_problems(readme: str, helps: dict[str, str]) -> list[str]:
    """Subcommands the README's command table leaves out or describes otherwise than ``pbg --help``."""
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `pbg (\w+)[^`]*` \| (.*) \|$", readme, re.MULTILINE)}
    problems = [f"README.md has no row for `pbg {name}`" for name in helps if name not in rows]
    problems += [
        f"README.md describes `pbg {name}` as {rows[name]!r}; pbg --help says {text!r}"
        for name, text in helps.items()
        if name in rows and rows[name] != text
    ]
    return problems + [f"README.md lists `pbg {name}`, which is no subcommand" for name in rows if name not in helps]


def read(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def test_the_readme_stays_a_front_door() -> None:
    lines = len(read("README.md").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_the_readme_indexes_every_docs_page() -> None:
    assert index_problems(read("README.md"), docs_pages(REPO)) == []


def test_the_index_check_fails_for_a_missing_or_an_unlinked_page() -> None:
    readme = "- [docs/a.md](docs/a.md): A.\n- [docs/gone.md](docs/gone.md#x): gone.\n"
    assert index_problems(readme, ["docs/a.md", "docs/new.md"]) == [
        "README.md does not link docs/new.md",
        "README.md links docs/gone.md, which does not exist",
    ]


def test_every_bench_target_is_documented_and_runs_a_bench_module() -> None:
    targets = bench_targets(read("Makefile"))
    assert len(targets) >= 15, sorted(targets)  # the parser found the Makefile's rules
    assert bench_problems(targets, read("docs/benchmarks.md"), REPO) == []


def test_the_bench_check_fails_for_an_undocumented_or_a_script_target(tmp_path: Path) -> None:
    makefile = (
        "bench-speed: $(STAMP) pbg-venv\n\t$(PY) -m bench.speed\n\n"
        "bench-new: $(STAMP)\n\t$(PY) -m bench.new\n\n"
        "bench-s3-speed: $(STAMP)\n\t$(PY) bench/s3_speed.py\n"
    )
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "speed.py").write_text("")
    targets = bench_targets(makefile)
    assert sorted(targets) == ["bench-new", "bench-s3-speed", "bench-speed"]
    assert bench_problems(targets, "`make bench-speed` runs `bench.speed`", tmp_path) == [
        "Makefile bench-new: bench/new.py does not exist",
        "docs/benchmarks.md does not document `make bench-new`",
        "docs/benchmarks.md does not name the module bench.new (bench-new)",
        "Makefile bench-s3-speed: runs '$(PY) bench/s3_speed.py', not `$(PY) -m bench.NAME`",
    ]


def test_the_readme_describes_every_subcommand_as_pbg_help_does() -> None:
    assert synopsis_problems(read("README.md"), subcommand_helps()) == []


def test_the_synopsis_check_fails_for_a_missing_or_changed_subcommand() -> None:
    readme = "| `pbg train CONFIG` | train it |\n| `pbg eval CONFIG` | rank |\n"
    assert synopsis_problems(readme, {"train": "train it", "eval": "rank edges", "serve": "serve"}) == [
        "README.md has no row for `pbg serve`",
        "README.md describes `pbg eval` as 'rank'; pbg --help says 'rank edges'",
    ]


def test_relative_links_of_the_readme_and_docs_point_at_files() -> None:
    names = ["README.md", "bench/README.md", *docs_pages(REPO)]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout  # the repository's files, new ones too; not .venv or results
    exists = {name for name in listed.splitlines() if (REPO / name).is_file()}
    assert broken_links({name: read(name) for name in names}, exists) == []


def test_the_link_check_fails_for_a_missing_file() -> None:
    files = {"docs/a.md": "[b](b.md#x) [readme](../README.md) [web](https://x.org/y.md) [gone](gone.md)\n"}
    assert broken_links(files, {"docs/b.md", "README.md"}) == ["docs/a.md: gone.md"]
