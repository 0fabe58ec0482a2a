"""Every docs page the code and the README send a reader to exists, with the heading named.

A docstring that sends its reader to a page is a link no docs build checks: ``mkdocs build
--strict`` follows the links between pages, not the ones in the code (one named a page that
never was). This does for the
code what it does for the pages: each ``docs/<page>.md`` (and its ``#anchor``) that the
code, the tests, the scripts or the README name must be a page (and one of its headings).
No server: these run in the fast loop.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Where a docs page is named outside the docs themselves.
_FOLDERS = ("client", "rewrite", "server_plugin", "compose", "tests", ".ci")
_FILES = ("dev", "README.md")
_SUFFIXES = {".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".txt", ""}

_REFERENCE = re.compile(r"(?<![\w/.-])docs/([\w./-]+\.md)(?:#([\w-]+))?")


def _sources() -> list[Path]:
    files = [ROOT / name for name in _FILES]
    for folder in _FOLDERS:
        files += [
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.is_file() and path.suffix in _SUFFIXES and "results" not in path.parts
        ]
    return files


def _references() -> list[tuple[str, int, str, str | None]]:
    found = []
    for path in _sources():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in _REFERENCE.finditer(line):
                where = str(path.relative_to(ROOT))
                found.append((where, number, match.group(1), match.group(2)))
    return found


def _slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's ``toc`` slugify), after the
    inline markup (code spans, links, emphasis) is reduced to its text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*$", text, re.MULTILINE)}


def test_the_scan_finds_the_references_it_is_for() -> None:
    """The check is only worth having if it sees them: the README links its pages."""
    pages = {page for where, _, page, _ in _references() if where == "README.md"}
    assert {"getting-started.md", "contributing.md"} <= pages


def test_every_docs_page_the_code_names_exists() -> None:
    missing = [
        f"{where}:{line}: docs/{page}"
        for where, line, page, _ in _references()
        if not (DOCS / page).is_file()
    ]
    assert missing == [], "pages docs/ does not have: name an existing page"


def test_every_heading_the_code_links_to_is_on_its_page() -> None:
    missing = [
        f"{where}:{line}: docs/{page}#{anchor}"
        for where, line, page, anchor in _references()
        if anchor and (DOCS / page).is_file() and anchor not in _anchors(DOCS / page)
    ]
    assert missing == [], "anchors their page has no heading for"


def test_the_slug_is_the_one_mkdocs_makes() -> None:
    assert _slug("What the server needs (any client Python works)") == (
        "what-the-server-needs-any-client-python-works"
    )
    assert _slug("`apply_changes` and its [state](x.md)") == "apply_changes-and-its-state"
