"""The CLI reference (the site's reference/cli.md, generated at build): every command, argument
and option of the `tasklease` Typer app, rendered by Typer's own documented generator
(`typer MODULE utils docs`), the same text `tasklease COMMAND --help` prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# The Typer object behind the `tasklease` console script (pyproject: app.cli:main).
CLI_MODULE = "app.cli.main"
CLI_OBJECT = "cli"
PROGRAM = "tasklease"

HEADING = re.compile(r"^(#+) `(?P<path>[^`]+)`$")
COMMAND_ITEM = re.compile(r"^\* `(?P<name>[^`]+)`:")


def typer_docs() -> str:
    """Typer's Markdown for the app, in a process of its own (a fixed width, no colour)."""
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    command = [sys.executable, "-m", "typer", "--app", CLI_OBJECT, CLI_MODULE, "utils", "docs"]
    out = subprocess.run(  # noqa: S603  # this interpreter and fixed arguments
        [*command, "--name", PROGRAM, "--title", "CLI reference"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}): {out.stderr}")
    return out.stdout


def anchor(path: str) -> str:
    """The id Python-Markdown's toc gives the heading `` `tasklease jobs list` ``."""
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def link_commands(markdown: str) -> str:
    """Each entry of a group's command list links to that command's section."""
    lines = []
    parent = PROGRAM
    in_commands = False
    for line in markdown.splitlines():
        heading = HEADING.match(line)
        if heading:
            parent = heading["path"]
        if line.startswith("**"):
            in_commands = line == "**Commands**:"
        item = COMMAND_ITEM.match(line) if in_commands else None
        if item:
            target = anchor(f"{parent} {item['name']}")
            line = f"* [`{item['name']}`](#{target}):" + line[item.end() :]
        lines.append(line)
    return "\n".join(lines) + "\n"


def render() -> str:
    markdown = link_commands(typer_docs())
    head, usage, rest = markdown.partition("**Usage**:")
    intro = (
        "Generated from the `tasklease` command's Typer app when the site is built: "
        "`tasklease COMMAND --help` prints the same. Commands that talk to the database or "
        "the queue read the [settings](settings.md) from the environment.\n\n"
    )
    return head + intro + usage + rest
