"""Every reference to a document from the code, the tests, the tooling and the
infrastructure points at a page that exists, and at a heading that page has (issue 29).

Three forms are checked, in app/, handlers/, tasklease/, tests/, scripts/, bench/,
infra/, examples/ and the Makefile:

- ``docs/<path>.md`` or ``docs/<path>.md#<anchor>``: the page exists under docs/ and,
  with an anchor, one of its headings has that id. Ids are what mkdocs gives headings:
  an attr_list ``{#id}`` where the heading has one, else Python-Markdown's
  ``toc.slugify`` of the heading's text, made unique with ``_1``, ``_2``... as the toc
  extension does.
- a README heading cited by name, ``README "Layout"`` or ``infra/README.md, "Authentication"``:
  that README exists and has a heading starting with the cited words (a README's
  headings are not ids: citations name them in words, often the first words only).
- the old design document's file name: it is no longer in the project
  (docs/explain/design.md holds the design), so every mention of it is stale.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCANNED_DIRS = ("app", "handlers", "tasklease", "tests", "scripts", "bench", "infra", "examples")
SCANNED_FILES = ("Makefile",)
# Text files worth reading; data (json, csv), images and lock files cite no document.
SUFFIXES = frozenset(
    {
        ".py",
        ".sql",
        ".tf",
        ".md",
        ".sh",
        ".toml",
        ".yml",
        ".yaml",
        ".cfg",
        ".txt",
        ".ini",
        ".html",
        ".js",
        ".css",
    }
)
SKIPPED_PARTS = frozenset({"__pycache__", ".venv", "node_modules", ".terraform", ".pytest_cache"})
THIS_FILE = Path(__file__).resolve()

# Written in two pieces so that this file does not cite it.
OLD_DESIGN = "DESIGN" + ".md"

DOCS_REF = re.compile(r"(?<![\w./-])docs/((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?")
README_REF = re.compile(r"(?<![\w.-])((?:[\w.-]+/)*README)(?:\.md)?,? [\"“]([^\"”\n]+)[\"”]")
FENCE = re.compile(r"^\s*(```|~~~)")
ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
ATTR_ID = re.compile(r"\s*\{:?\s*[^}]*?#([\w-]+)[^}]*\}\s*$")
ATTR_ANY = re.compile(r"\s*\{:?[^}]*\}\s*$")


# --- slugs as mkdocs makes them ---------------------------------------------------------


def _slugify_copy(value: str, separator: str) -> str:
    """Python-Markdown's ``markdown.extensions.toc.slugify`` (3.x), for a checkout that
    has not installed mkdocs: ``test_the_copy_matches_python_markdown`` holds it to the
    real one wherever that is installed."""
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(rf"[{separator}\s]+", separator, value)


def _real_slugify() -> Callable[[str, str], str] | None:
    try:
        from markdown.extensions.toc import slugify
    except ImportError:
        return None
    return slugify  # type: ignore[no-any-return]


SLUGIFY: Callable[[str, str], str] = _real_slugify() or _slugify_copy


def heading_text(raw: str) -> str:
    """A heading's text as the toc extension sees it: the rendered inline markup's text
    (code spans keep their content, links their label, emphasis markers go)."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # images: their alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their label
    text = re.sub(r"`+([^`]*)`+", r"\1", text)  # code spans: their content
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = re.sub(r"(\*\*|__|\*|(?<!\w)_|_(?!\w))", "", text)  # emphasis markers
    return html.unescape(text)


@dataclass(frozen=True)
class Heading:
    text: str  # as written, attr_list removed
    id: str  # what mkdocs makes its id


def headings(markdown: str) -> list[Heading]:
    """ATX headings outside fenced code, with their ids (explicit ``{#id}``, else the
    unique slug)."""
    found: list[Heading] = []
    used: set[str] = set()
    fenced: str | None = None
    for line in markdown.splitlines():
        fence = FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fence.group(1) == fenced:
                fenced = None
            continue
        if fenced is not None:
            continue
        m = ATX.match(line)
        if not m:
            continue
        raw = m.group(2)
        explicit = ATTR_ID.search(raw)
        raw = ATTR_ANY.sub("", raw)
        if explicit:
            ident = explicit.group(1)
        else:
            ident = SLUGIFY(heading_text(raw), "-")
            base, n = ident, 0
            while ident in used:  # the toc extension's unique(): slug, slug_1, slug_2...
                n += 1
                ident = f"{base}_{n}"
        used.add(ident)
        found.append(Heading(raw.strip(), ident))
    return found


# --- the references -------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    where: str  # path:line
    cited: str  # the text as it stands


def scanned_files(root: Path) -> Iterator[Path]:
    for name in SCANNED_FILES:
        if (root / name).is_file():
            yield root / name
    for top in SCANNED_DIRS:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if SKIPPED_PARTS.intersection(path.parts) or not path.is_file():
                continue
            if path.suffix in SUFFIXES and path.resolve() != THIS_FILE:
                yield path


def problems(root: Path) -> tuple[list[Reference], list[str]]:
    """Every reference found under ``root``, and what is wrong with those that are."""
    found: list[Reference] = []
    wrong: list[str] = []
    pages: dict[Path, list[Heading] | None] = {}

    def page(path: Path) -> list[Heading] | None:
        if path not in pages:
            pages[path] = headings(path.read_text(encoding="utf-8")) if path.is_file() else None
        return pages[path]

    for path in scanned_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(root)
        for n, line in enumerate(text.splitlines(), start=1):
            where = f"{rel}:{n}"
            if OLD_DESIGN in line:
                found.append(Reference(where, OLD_DESIGN))
                wrong.append(
                    f"{where}: cites {OLD_DESIGN}, which is not in the project: point it at "
                    f"the docs/explain/design.md section that holds the point"
                )
            for m in DOCS_REF.finditer(line):
                target, anchor = m.group(1), m.group(2)
                found.append(Reference(where, m.group(0)))
                heads = page(root / "docs" / target)
                if heads is None:
                    wrong.append(f"{where}: {m.group(0)}: no page docs/{target}")
                elif anchor is not None and anchor not in {h.id for h in heads}:
                    ids = ", ".join(sorted(h.id for h in heads))
                    wrong.append(
                        f"{where}: {m.group(0)}: docs/{target} has no heading #{anchor} "
                        f"(its ids: {ids})"
                    )
            for m in README_REF.finditer(line):
                readme, cited = m.group(1) + ".md", m.group(2)
                found.append(Reference(where, m.group(0)))
                heads = page(root / readme)
                if heads is None:
                    wrong.append(f"{where}: {m.group(0)}: no file {readme}")
                    continue
                want = cited.strip().lower()
                if not any(heading_text(h.text).strip().lower().startswith(want) for h in heads):
                    wrong.append(
                        f"{where}: {m.group(0)}: {readme} has no heading {cited!r}; "
                        f"point it at the docs page that holds it"
                    )
    return found, wrong


# --- the tests ------------------------------------------------------------------------


def test_every_doc_reference_points_at_a_page_and_heading_that_exist() -> None:
    found, wrong = problems(ROOT)
    assert not wrong, f"{len(wrong)} stale doc reference(s):\n" + "\n".join(wrong)
    # The scan is not vacuous: the code cites the design page in many places.
    assert sum("docs/explain/design.md" in r.cited for r in found) >= 10


def test_a_stale_reference_of_each_form_is_caught(tmp_path: Path) -> None:
    docs = tmp_path / "docs" / "explain"
    docs.mkdir(parents=True)
    (docs / "design.md").write_text(
        "# Design\n\n## Leases and fencing {#leases}\n\n## The outbox\n"
    )
    (tmp_path / "README.md").write_text("# x\n\n## Who may do what: keys\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "a.py").write_text(
        "# docs/explain/design.md#leases and docs/explain/design.md#the-outbox\n"
        '# README "Who may do what"\n'
        "# docs/explain/design.md#fencing\n"
        "# docs/explain/nowhere.md\n"
        '# README "Layout"\n'
        f"# see {OLD_DESIGN}\n"
    )
    found, wrong = problems(tmp_path)
    assert len(found) == 7
    assert [w.split(": ", 1)[0] for w in wrong] == [
        "app/a.py:3",
        "app/a.py:4",
        "app/a.py:5",
        "app/a.py:6",
    ]
    assert "has no heading #fencing" in wrong[0]
    assert "no page docs/explain/nowhere.md" in wrong[1]
    assert "README.md has no heading 'Layout'" in wrong[2]
    assert OLD_DESIGN in wrong[3]


def test_heading_ids_are_mkdocs_ids() -> None:
    text = (
        "# Title\n"
        "## The HTTP API (`/v1`)\n"
        "## Leases and fencing {#leases}\n"
        "## Leases and fencing\n"
        "## Leases and fencing\n"
        "```bash\n# not a heading\n```\n"
        "## What *is* guaranteed, and what is not\n"
        "## Priorities & [fair queues](x.md)\n"
    )
    assert [h.id for h in headings(text)] == [
        "title",
        "the-http-api-v1",
        "leases",
        "leases-and-fencing",
        "leases-and-fencing_1",
        "what-is-guaranteed-and-what-is-not",
        "priorities-fair-queues",
    ]


SAMPLES = [
    "The HTTP API (/v1)",
    "What it guarantees, and what it does not",
    "Parking: the running cap and the queue window",
    "Café  --  Straße ✓",
    "snake_case and dash-case",
]


@pytest.mark.docs_tools  # make test-runtime's venv has no docs group: deselected there
def test_the_copy_matches_python_markdown() -> None:
    real = _real_slugify()
    assert real is not None, "Python-Markdown is missing: `make install` syncs the docs group"
    assert [_slugify_copy(s, "-") for s in SAMPLES] == [real(s, "-") for s in SAMPLES]
