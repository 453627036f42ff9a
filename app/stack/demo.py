"""The demo of ``make run``: five tickets submitted through the API and shown until they
settle, in a live table on a terminal, as plain lines and one table elsewhere (a pipe,
CI). Every value from the API is escaped: a ticket is a tenant's text, never markup."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Column, Table

from app.states import FINAL_FOR_NOW, JobState, styled

if TYPE_CHECKING:
    from app.stack.dev import DevStack

console = Console()  # what `make run` prints to

DEMO_TICKETS: list[dict[str, Any]] = [
    {
        "ticket_id": "T-1001",
        "subject": "Charged twice for my invoice",
        "body": "My card was charged twice this month. Please refund one payment.",
        "customer_email": "ana@example.com",
    },
    {
        "ticket_id": "T-1002",
        "subject": "App crashes on login",
        "body": "Since the update the app crashes with an error when I sign in. Urgent!",
    },
    {
        "ticket_id": "T-1003",
        "subject": "Please add dark mode",
        "body": "It would be nice to have a dark theme. Feature request.",
    },
    {
        "ticket_id": "T-1004",
        "subject": "[transient] Password reset email never arrives",
        "body": "I asked for a password reset three times. (The fake model fails its first call.)",
    },
    {
        "ticket_id": "T-1005",
        "subject": "[permanent] Unreadable ticket",
        "body": "The fake model refuses this one: it lands in the dead-letter queue.",
    },
]


def _table(jobs: list[dict[str, Any]], elapsed: float, workers: str) -> Table:
    """The demo jobs; every value from the API is escaped (a ticket is tenant text)."""
    table = Table(
        Column("job", no_wrap=True, min_width=36),  # whole: operators paste it into --job
        Column("ticket", no_wrap=True),
        Column("state", no_wrap=True, min_width=len(JobState.DEAD_LETTERED)),
        Column("attempt", no_wrap=True),
        "outcome",
        title=f"demo jobs · {elapsed:4.1f} s{workers}",
        title_justify="left",
    )
    for j in jobs:
        outcome = ""
        if j["state"] == JobState.SUCCEEDED and j["result"]:
            outcome = f"{j['result'].get('category')} / {j['result'].get('priority')}"
        elif j["last_error"]:
            outcome = j["last_error"][:70]
        table.add_row(
            escape(str(j["id"])),
            escape(str(j["payload"].get("ticket_id", ""))),
            styled(JobState(j["state"])),
            f"{j['attempt']}/{j['max_attempts']}",
            escape(outcome),
        )
    return table


def _client(stack: DevStack, timeout: float) -> httpx.Client:
    return httpx.Client(
        base_url=stack.api_url,
        timeout=timeout,
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )


def submit_demo(stack: DevStack) -> list[str]:
    ids = []
    with _client(stack, 30) as client:
        for ticket in DEMO_TICKETS:
            resp = client.post(
                "/v1/jobs", json={"kind": "support.triage", "payload": ticket, "max_attempts": 3}
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
    return ids


class _Workers:
    """Says once when every worker polls; until then the table says it waits for them."""

    def __init__(self, stack: DevStack) -> None:
        self.stack = stack
        self.announced = False

    def note(self) -> str:
        ready, started = self.stack.polling()
        if ready < started:
            return f" · waiting for workers ({ready}/{started} polling)"
        if not self.announced:
            self.announced = True
            console.print(f"[green]✓[/] {started} worker processes polling the queue")
        return ""


def watch(stack: DevStack, ids: list[str], timeout: float = 120.0) -> bool:
    """The demo jobs until they settle: a live table on a terminal; elsewhere (a pipe,
    CI) one line per change and the final table, which never runs into the next line."""
    start = time.monotonic()
    workers = _Workers(stack)
    live = Live(console=console, refresh_per_second=4) if console.is_terminal else None
    seen: dict[str, str] = {}
    with _client(stack, 10) as client, live if live is not None else contextlib.nullcontext():
        while True:
            jobs = [client.get(f"/v1/jobs/{i}").raise_for_status().json() for i in ids]
            note = workers.note()
            table = _table(jobs, time.monotonic() - start, note)
            if live is not None:
                live.update(table)
            else:
                _print_changes(jobs, seen, note)
            settled = all(JobState(j["state"]) in FINAL_FOR_NOW for j in jobs)
            if settled or time.monotonic() - start > timeout or stack.check():
                break
            time.sleep(0.25)
    if live is None:  # a log, not a screen: as wide as the table needs, up to 160
        console.print(table, width=max(console.width, 160))
    return settled


def _print_changes(jobs: list[dict[str, Any]], seen: dict[str, str], note: str) -> None:
    if note and seen.get("workers") != note:
        console.print(escape(note.removeprefix(" · ")), highlight=False)
        seen["workers"] = note
    for j in jobs:
        line = f"{j['payload'].get('ticket_id', '')} {j['state']} (attempt {j['attempt']}/{j['max_attempts']})"
        if seen.get(str(j["id"])) != line:
            console.print(escape(line), highlight=False)
            seen[str(j["id"])] = line
