"""The demo of ``make run``: five tickets and one agent.research job submitted through the
API and shown until they settle, in a live table on a terminal, as plain lines and one
table elsewhere (a pipe, CI). The research job waits for a person's approval: when its
notice reaches the local webhook receiver, the demo prints the curl and CLI lines that
approve it (with ``--exit-when-done`` it approves it itself). Every value from the API
or the webhook is escaped: a ticket is a tenant's text, never markup."""

from __future__ import annotations

import contextlib
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Column, Table

from app import errors
from app.states import FINAL_FOR_NOW, JobState, styled
from app.tools.stack import state

if TYPE_CHECKING:
    from app.tools.stack.dev import DevStack

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


RESEARCH = "research"  # the research job's label in the table and the lines
APPROVE = {"approved": True}  # what the printed lines answer the approval with


def research_payload(stack: DevStack) -> dict[str, Any]:
    """The demo's agent.research job: an hour to approve, posted 3 s after approval."""
    return {
        "topic": "durable timers on SQS and PostgreSQL",
        "approval_timeout_seconds": 3600,
        "post_delay_seconds": 3,
        "callback_base_url": stack.api_url,
    }


def _label(job: dict[str, Any]) -> str:
    return (
        RESEARCH
        if job.get("kind") == "agent.research"
        else str(job["payload"].get("ticket_id", ""))
    )


def _outcome(job: dict[str, Any]) -> str:
    result = job["result"]
    if job["state"] == JobState.SUCCEEDED and isinstance(result, dict):
        if job.get("kind") == "agent.research":
            return f"{result.get('status')}: {result.get('answered')} of 3 sub-queries"
        return f"{result.get('category')} / {result.get('priority')}"
    if job.get("kind") == "agent.research" and job["state"] == JobState.WAITING:
        return "waiting (children, approval or the quiet hour)"
    return str(job["last_error"] or "")[:70]


def _attempts(job: dict[str, Any]) -> str:
    """Attempts used of the budget, as the API counts them: a run that ends waiting gives
    its attempt back, so a job that ran twice and waits has used none (runs says 2)."""
    return f"{job['attempt']}/{job['max_attempts']}"


def _table(jobs: list[dict[str, Any]], elapsed: float, workers: str) -> Table:
    """The demo jobs; every value from the API is escaped (a ticket is tenant text)."""
    table = Table(
        Column("job", no_wrap=True, min_width=36),  # whole: operators paste it into --job
        Column("ticket", no_wrap=True),
        Column("state", no_wrap=True, min_width=len(JobState.DEAD_LETTERED)),
        Column("runs", no_wrap=True),
        Column("attempts used", no_wrap=True),
        "outcome",
        title=f"demo jobs · {elapsed:4.1f} s{workers}",
        title_justify="left",
    )
    for j in jobs:
        table.add_row(
            escape(str(j["id"])),
            escape(_label(j)),
            styled(JobState(j["state"])),
            str(j["runs"]),
            _attempts(j),
            escape(_outcome(j)),
        )
    return table


def _client(stack: DevStack, timeout: float) -> httpx.Client:
    return httpx.Client(
        base_url=stack.api_url,
        timeout=timeout,
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )


def submit_demo(stack: DevStack) -> tuple[list[str], str]:
    """The tickets' job ids, and the research job's."""
    ids = []
    with _client(stack, 30) as client:
        for ticket in DEMO_TICKETS:
            resp = client.post(
                "/v1/jobs", json={"kind": "support.triage", "payload": ticket, "max_attempts": 3}
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
        resp = client.post(
            "/v1/jobs",
            json={"kind": "agent.research", "payload": research_payload(stack), "max_attempts": 3},
        )
        resp.raise_for_status()
    return ids, str(resp.json()["id"])


@dataclass
class Approval:
    """The research job's wait for a person, seen in the local webhook receiver's
    deliveries: the notice carries the callback's token and the URL that answers it."""

    stack: DevStack
    job_id: str
    answer_it: bool  # --exit-when-done: nobody is there to answer, the demo does
    token: str | None = None
    answered: bool = False

    def poll(self) -> None:
        """Print the approval lines once the notice arrives; answer it when asked to."""
        if self.token is None:
            notice = self._notice()
            if notice is None:
                return
            self.token = str(notice["token"])
            print_approval(
                self.job_id, str(notice["approve_url"]), self.token, ui=self.stack.api_url + "/ui"
            )
        if self.answer_it and not self.answered:
            self.answered = True
            console.print(
                "[yellow]--exit-when-done:[/] nobody is here to approve, so the demo does, "
                "as the curl line would",
                highlight=False,
                soft_wrap=True,
            )
            answer(self.stack, self.token)

    def _notice(self) -> dict[str, Any] | None:
        with httpx.Client(base_url=self.stack.hook_url, timeout=10) as client:
            deliveries = client.get("/deliveries").raise_for_status().json()["deliveries"]
        for d in deliveries:
            body = d.get("body")
            if (
                isinstance(body, dict)
                and body.get("event") == "approval_requested"
                and body.get("job_id") == self.job_id
            ):
                return body
        return None


class Follow:
    """Says when the research job moves on (approved, sleeping, posted) while make run
    serves; a failed look says nothing (the API may be restarting)."""

    def __init__(self, stack: DevStack, job_id: str) -> None:
        self.stack, self.job_id, self.state = stack, job_id, JobState.WAITING.value

    def poll(self) -> None:
        try:
            with _client(self.stack, 5) as client:
                job = client.get(f"/v1/jobs/{self.job_id}").raise_for_status().json()
        except httpx.HTTPError:
            return
        if job["state"] != self.state:
            self.state = job["state"]
            result = job["result"] if isinstance(job["result"], dict) else {}
            status = f": {result.get('status')}" if result.get("status") else ""
            console.print(
                f"research job {escape(self.job_id)}: {styled(JobState(self.state))}"
                f"{escape(status)}",
                highlight=False,
            )


def approve_lines(approve_url: str, token: str) -> tuple[str, str]:
    """The curl line and the CLI line that approve the callback, ready to paste."""
    body = shlex.quote('{"result": {"approved": true}}')
    curl = f"curl -X POST {shlex.quote(approve_url)} -H 'content-type: application/json' -d {body}"
    result = shlex.quote('{"approved": true}')
    cli = f"{state.cli_name()} callbacks complete {shlex.quote(token)} --result {result}"
    return curl, cli


def print_approval(job_id: str, approve_url: str, token: str, *, ui: str | None = None) -> None:
    curl, cli = approve_lines(approve_url, token)
    console.print(
        f"\n[bold bright_cyan]⏸ the research job {escape(job_id)} waits for approval[/] "
        f"(no worker is held meanwhile; see [bold]{escape(state.cli_name())} jobs list --state waiting[/]). "
        "Approve it from another shell:",
        soft_wrap=True,
        highlight=False,
    )
    for line in (curl, "or", cli):
        console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    if ui is not None:
        # The web view's job page, whose Approve button answers the same callback.
        console.print(f"  or click Approve on {escape(ui)}#/jobs/{escape(job_id)}", soft_wrap=True)
    console.print()


def answer(stack: DevStack, token: str) -> None:
    """Approve the callback as the curl line does: POST /v1/callbacks/{token} on the API,
    with no API key (the token is the credential)."""
    with httpx.Client(base_url=stack.api_url, timeout=30) as client:
        resp = client.post(f"/v1/callbacks/{token}", json={"result": APPROVE})
    if resp.status_code != 200:
        raise errors.TaskleaseError(
            f"approving the research job: {resp.status_code} {resp.text[:200]}"
        )


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


def watch(
    stack: DevStack, ids: list[str], approval: Approval | None = None, timeout: float = 120.0
) -> bool:
    """The demo jobs until they settle: a live table on a terminal; elsewhere (a pipe,
    CI) one line per change and the final table, which never runs into the next line.
    The research job (``approval``) counts as settled once it waits for a person, unless
    the demo answers it itself: then once it finished."""
    start = time.monotonic()
    workers = _Workers(stack)
    live = Live(console=console, refresh_per_second=4) if console.is_terminal else None
    seen: dict[str, str] = {}
    with _client(stack, 10) as client, live if live is not None else contextlib.nullcontext():
        while True:
            if approval is not None:
                approval.poll()
            jobs = [client.get(f"/v1/jobs/{i}").raise_for_status().json() for i in ids]
            note = workers.note()
            table = _table(jobs, time.monotonic() - start, note)
            if live is not None:
                live.update(table)
            else:
                _print_changes(jobs, seen, note)
            settled = all(
                JobState(j["state"]) in FINAL_FOR_NOW
                or (
                    approval is not None
                    and str(j["id"]) == approval.job_id
                    and approval.token is not None
                    and not approval.answer_it
                )
                for j in jobs
            )
            if settled or time.monotonic() - start > timeout or stack.check():
                break
            time.sleep(0.25)
    if live is None:  # a log, not a screen: as wide as the table needs, up to 160
        # (print's own width= is capped at the console's: 80 in a pipe folded the outcome)
        width = console.width
        console.width = max(width, 160)
        try:
            console.print(table)
        finally:
            console.width = width
    return settled


def _print_changes(jobs: list[dict[str, Any]], seen: dict[str, str], note: str) -> None:
    if note and seen.get("workers") != note:
        console.print(escape(note.removeprefix(" · ")), highlight=False)
        seen["workers"] = note
    for j in jobs:
        line = f"{_label(j)} {j['state']} (runs {j['runs']}, attempts used {_attempts(j)})"
        if seen.get(str(j["id"])) != line:
            console.print(escape(line), highlight=False)
            seen[str(j["id"])] = line
