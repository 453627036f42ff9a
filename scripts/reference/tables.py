"""Text from the code (descriptions, docstrings) made safe for the generated pages."""

from __future__ import annotations

import re
from collections.abc import Callable

CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    out, last = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [change(text[last : span.start()]), span.group(0)]
        last = span.end()
    out.append(change(text[last:]))
    return "".join(out)


def plain(text: str) -> str:
    """Prose with `<` and `>` shown as written (``tlk_<id>_<secret>``), not taken for HTML."""
    return _outside_code(text, lambda s: s.replace("<", "&lt;").replace(">", "&gt;"))


def cell(text: object) -> str:
    """Text that stays in one table cell: one line, and a `|` outside code escaped (inside
    a code span Python-Markdown's tables keep it, and an escape would show)."""
    flat = " ".join(str(text).split())
    return _outside_code(plain(flat), lambda s: s.replace("|", "\\|"))
