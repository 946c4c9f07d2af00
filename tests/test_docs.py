"""The project's docs: the design notes are cited nowhere (the docs say things in the
project's own words), every citation "(LABEL, docs/<page>.md)" in the code, the protos, the README
and the docs names a page that exists and has a heading with that label, every relative link in
the docs resolves, and every registered policy is named on a policy page."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from apportion.solver.registry import policies

ROOT = Path(__file__).resolve().parents[1]
DESIGN_NOTES = re.compile(r"formulations\.md|(?<![\w/-])placement\.md|(?<![\w/-])data\.md|"
                          r"architecture\.md|shared/design")
LABEL = r"(?:[A-D]|T)\d+(?:\.\d+)?"
CITATION = re.compile(r"((?:[^()\n]*?))\b(docs/[\w/.-]+\.md)")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def tracked(*suffixes: str) -> list[Path]:
    """Files under version control with one of `suffixes` (generated code excluded)."""
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / name for name in names if name.endswith(suffixes)
            and not name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"))]


def headings(page: Path) -> str:
    return "\n".join(line for line in page.read_text().splitlines() if line.startswith("#"))


def test_the_design_notes_are_cited_nowhere() -> None:
    found = [f"{path.relative_to(ROOT)}:{k}: {line.strip()}"
             for path in tracked(".py", ".proto", ".md", ".toml", ".sh")
             for k, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
             if DESIGN_NOTES.search(line) and path.name != "test_docs.py"]
    assert not found, "\n".join(found)


def test_every_citation_names_a_labelled_section_of_an_existing_page() -> None:
    wrong: list[str] = []
    count = 0
    for path in tracked(".py", ".proto", ".md"):
        for k, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for match in CITATION.finditer(line):
                page = ROOT / match.group(2)
                where = f"{path.relative_to(ROOT)}:{k}"
                if not page.is_file():
                    wrong.append(f"{where}: no page {match.group(2)}")
                    continue
                # the labels cited just before the page, back to "(" or ";" or the line start
                before = re.split(r"[(;]", match.group(1))[-1]
                labels = re.findall(rf"\b{LABEL}\b", before)
                text = headings(page)
                for label in labels:
                    count += 1
                    if not re.search(rf"(?m)^#+ .*\b{re.escape(label)}\b", text):
                        wrong.append(f"{where}: {match.group(2)} has no section {label}")
    assert not wrong, "\n".join(wrong)
    assert count > 100  # the code cites the docs everywhere


@pytest.mark.parametrize("page", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: p.name)
def test_links_between_pages_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" not in target:
            assert (page.parent / target).resolve().is_file(), f"{page.name} -> {target}"


def test_every_registered_policy_has_a_page() -> None:
    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "policies").glob("*.md"))
    missing = [spec.name for spec in policies() if f"`{spec.name}`" not in text]
    assert not missing, f"no page of docs/policies names {missing}"


def test_every_page_is_listed_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        relative = page.relative_to(ROOT / "docs").as_posix()
        assert relative == "README.md" or f"({relative})" in index, relative


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start:following if following > 0 else None]


def _run(code: str) -> str:
    import sys

    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_readmes_property_tester_example_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    (code,) = _python_blocks(_section(readme, "## For property testers (Python)"))
    out = _run(code)
    assert out.splitlines()[0].startswith("optimal 0.56")
    assert "objective recomputed from the plan (min_level)" in out
    assert '5 snapshot.jobs[0].throughput["v100"]' in out


def test_the_python_api_page_example_runs() -> None:
    (code,) = _python_blocks((ROOT / "docs" / "python-api.md").read_text())
    _run(code + "\nassert result.optimal, result.termination\n")
