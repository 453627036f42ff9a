"""The documentation's code blocks against the code, so a renamed command, flag, route or
import cannot leave a page silently wrong.

The tutorial runs whole against a real stack (tests/e2e/test_docs_tutorial.py), and the
home page's second-shell block too (tests/e2e/test_make_run.py). The other pages' blocks
are checked here without servers: every Python block parses and imports nothing of
``app`` (the implementation: a reader imports ``tasklease``); every ``tasklease``
command names a command of the CLI with options it has; every ``make`` target exists;
every ``curl`` names a route, with its method, of the OpenAPI document.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from app.api import create_app
from app.cli.main import cli
from app.settings import config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "index.md",
    ROOT / "docs" / "tutorial.md",
    *sorted((ROOT / "docs" / "howto").glob("*.md")),
    *(ROOT / "docs" / "explain" / f"{name}.md" for name in ("performance", "cost", "chaos")),
]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
# Routes the API serves outside its OpenAPI document.
UNDOCUMENTED = {("GET", "/metrics"), ("GET", "/ui")}


def blocks(lang: set[str]) -> list[tuple[str, str]]:
    """(page:line, code) of each fenced block in one of ``lang``, includes resolved."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) not in lang:
                continue
            code = INCLUDE.sub(lambda i: (ROOT / i.group(1)).read_text(), m.group(2))
            line = text[: m.start()].count("\n") + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", code))
    return found


def test_the_pages_have_blocks_to_check() -> None:
    assert len(blocks({"python"})) >= 10
    assert len(blocks({"bash", "sh"})) >= 20


@pytest.mark.parametrize(("where", "code"), blocks({"python"}))
def test_python_blocks_parse_and_import_only_the_public_package(where: str, code: str) -> None:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, where, "exec", flags=flags, dont_inherit=True)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        internal = [n for n in names if n == "app" or n.startswith("app.")]
        assert not internal, f"{where}: imports {internal}; the docs import tasklease"


def shell_commands(code: str) -> list[list[str]]:
    """Each simple command of a block, as tokens: continuation lines joined, comments
    dropped, split at ;, &&, ||, | and $( ... )."""
    code = code.replace("\\\n", " ")
    commands = []
    for raw in code.splitlines():
        try:
            tokens = shlex.split(raw, comments=True)
        except ValueError:  # an unbalanced quote in a line the block continues
            continue
        current: list[str] = []
        for token in tokens:
            for part in re.split(r"(\$\(|\)|;|&&|\|\||\|)", token):
                if part in ("$(", ")", ";", "&&", "||", "|"):
                    commands.append(current)
                    current = []
                elif part:
                    current.append(part)
        commands.append(current)
    return [c for c in commands if c]


def tasklease_invocations() -> list[tuple[str, list[str]]]:
    out = []
    for where, code in blocks({"bash", "sh"}):
        for tokens in shell_commands(code):
            if "tasklease" in tokens:
                out.append((where, tokens[tokens.index("tasklease") + 1 :]))
    return out


@pytest.fixture(scope="module")
def command_tree() -> Any:
    return typer.main.get_command(cli)


def resolve(tree: Any, args: list[str]) -> tuple[Any, list[str]]:
    """The command ``args`` name (None if there is none) and the arguments left. A group
    has ``commands`` (typer's own click); a command has only ``params``."""
    command, rest = tree, list(args)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        command, rest = command.commands.get(rest[0]), rest[1:]
    return command, rest


def test_every_tasklease_command_and_option_in_the_docs_exists(command_tree: Any) -> None:
    invocations = tasklease_invocations()
    assert len(invocations) >= 30
    wrong = []
    for where, args in invocations:
        command, rest = resolve(command_tree, args)
        if command is None:
            wrong.append(f"{where}: tasklease {' '.join(args)}: no such command")
            continue
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for token in rest:
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and flag not in options:
                wrong.append(f"{where}: tasklease {' '.join(args)}: no option {flag}")
    assert not wrong, "\n".join(wrong)


def test_every_make_target_in_the_docs_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    wrong = []
    for where, code in blocks({"bash", "sh"}):
        for tokens in shell_commands(code):
            words = [t for t in tokens if not re.match(r"^\w+=", t)]  # after VAR=value ...
            if words and words[0] == "make":
                named = [t for t in words[1:] if not t.startswith("-")]
                wrong += [f"{where}: make {t}" for t in named if t not in targets]
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def routes() -> set[tuple[str, str]]:
    settings = config.load(
        database_url="postgresql://u@127.0.0.1:9/d",
        queue_url="http://127.0.0.1:9/q",
        dlq_url="http://127.0.0.1:9/d",
    )
    doc: dict[str, Any] = create_app(settings).openapi()
    return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops} | UNDOCUMENTED


def matches(path: str, template: str) -> bool:
    pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
    return re.fullmatch(pattern, path) is not None


def test_every_curl_in_the_docs_names_a_route_of_the_api(routes: set[tuple[str, str]]) -> None:
    seen, wrong = 0, []
    for where, code in blocks({"bash", "sh", ""}):
        for tokens in shell_commands(code):
            if tokens[0] != "curl":
                continue
            method = tokens[tokens.index("-X") + 1] if "-X" in tokens else "GET"
            urls = [t for t in tokens if re.search(r"(API_URL|:8000|^localhost)", t)]
            for url in urls:
                path = re.sub(r"^.*?(API_URL\}?|:8000)", "", url).split("?")[0]
                path = re.sub(r"\$\{?\w+\}?|<[^>]+>|…", "X", path)
                seen += 1
                if not any(m == method and matches(path, p) for m, p in routes):
                    wrong.append(f"{where}: {method} {path}")
    assert seen >= 20
    assert not wrong, "\n".join(wrong)
