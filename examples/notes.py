"""What the example agents (research_agent, openai_agent) share, whatever their framework:
the notes their tools research, what the tools do, where the model is, and the log of
their calls the tests read."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tasklease import ConfigError
from tasklease.fakemodel import RunningServer, serve_in_thread

# The notes the agents research: a stand-in for a search index.
PAGES = {
    "leases": "A lease fences a worker: only the holder of the current token records.",
    "effects": "An effect runs once per job: a later attempt returns its record.",
    "queues": "Queues deliver at least once, so a job may run more than once.",
}

# How long a note waits for a person's approval (a question asked with approve_notes):
# the job is `waiting` meanwhile, holding no worker; Approve or Reject in the web view.
APPROVAL_TIMEOUT = 24 * 3600


@dataclass
class Endpoint:
    """An OpenAI-compatible endpoint; ``server``: the fake model, if it is that."""

    base_url: str
    api_key: str
    model: str
    server: RunningServer | None = None


def setting(prefix: str, name: str) -> str | None:
    return os.environ.get(prefix + name) or None


def endpoint(prefix: str) -> Endpoint:
    """``<prefix>BASE_URL``, ``API_KEY`` and ``MODEL``; none set: the fake model, started
    in this process. One set without the others is refused, naming the one missing."""
    base_url = setting(prefix, "BASE_URL")
    if base_url is None:
        server = serve_in_thread()
        return Endpoint(server.url, "fake-key", "fake-model", server)
    api_key, model = setting(prefix, "API_KEY"), setting(prefix, "MODEL")
    if api_key is None or model is None:
        missing = "API_KEY" if api_key is None else "MODEL"
        raise ConfigError(f"{prefix}BASE_URL is set, so {prefix}{missing} must be too")
    return Endpoint(base_url, api_key, model)


@dataclass
class Tools:
    """The tools' side: the pages, the notes file, and the calls this process made (also
    appended to ``<prefix>TOOL_LOG``, if set, where the tests count every process's)."""

    prefix: str
    notes: Path | None = None
    calls: list[str] = field(default_factory=list)

    def called(self, tool: str, arg: str) -> None:
        self.calls.append(tool)
        log = setting(self.prefix, "TOOL_LOG")
        if log:
            with open(log, "a") as fh:
                fh.write(json.dumps({"tool": tool, "arg": arg, "pid": os.getpid()}) + "\n")

    def search(self, query: str) -> list[str]:
        self.called("search", query)
        words = {w.strip("?.,!").lower() for w in query.split()}
        return [name for name, text in PAGES.items() if words & set(text.lower().split())]

    def read_page(self, page: str) -> str:
        self.called("read_page", page)
        found = [text for name, text in PAGES.items() if name.rstrip("s") in page.lower()]
        return found[0] if found else f"no page is called {page!r}; pages: {', '.join(PAGES)}"

    def save_note(self, note: str) -> str:
        self.called("save_note", note)
        if self.notes is not None:
            with self.notes.open("a") as fh:
                fh.write(note + "\n")
        return "saved"


def tools(prefix: str) -> Tools:
    notes = setting(prefix, "NOTES")
    return Tools(prefix, Path(notes) if notes else None)
