"""``tasklease dev`` (what ``make run`` runs): the whole system on one machine.

Starts the embedded PostgreSQL (data kept in ``.tasklease/pgdata``), moto's SQS
server, the queues, the migrations, a webhook receiver, the API, worker
processes and the sweeper; submits demo jobs through the API and shows them
moving through their states until they settle; then keeps serving until Ctrl-C.
Any endpoint set in the environment (TASKLEASE_DATABASE_URL, TASKLEASE_QUEUE_URL
with TASKLEASE_DLQ_URL and AWS_ENDPOINT_URL_SQS) is used instead of the embedded one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from app import errors, kinds, store, transport
from app.config import Settings
from app.services import auth
from app.stack import embedded
from app.stack.stack import Stack
from app.states import FINAL_FOR_NOW, JobState, styled
from app.transport import secrets

console = Console()

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

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "make run"

# Settings the demo uses unless the environment says otherwise: quick retries, short polls.
DEMO_DEFAULTS = {
    "TASKLEASE_BACKOFF_BASE_SECONDS": "1",
    "TASKLEASE_BACKOFF_CAP_SECONDS": "5",
    "TASKLEASE_WAIT_TIME_SECONDS": "2",
    "TASKLEASE_FAKE_MODEL_LATENCY_MS": "800",
    "TASKLEASE_SWEEP_INTERVAL_SECONDS": "2",
}


class DevStack(Stack):
    """The shared stack, with the demo's settings, its key and its progress lines."""

    def __init__(
        self, settings: Settings, data_dir: Path, workers: int, api_port: int, sqs: str = "moto"
    ) -> None:
        super().__init__(data_dir.resolve() / "logs")
        self.settings = settings
        self.sqs = sqs
        self.data_dir = data_dir.resolve()
        self.workers = workers
        self.api_port = api_port
        self.api_key = ""

    def start(self) -> None:
        env = {k: v for k, v in DEMO_DEFAULTS.items() if k not in os.environ}
        s = self.settings
        with console.status("starting PostgreSQL (embedded)…"):
            database_url = self.start_postgres(self.data_dir / "pgdata", s.database_url)
        console.print(
            f"[green]✓[/] PostgreSQL  {store.redact(database_url)}"
            + ("  (embedded, data in .tasklease/pgdata)" if self.postgres else "")
        )
        env["TASKLEASE_DATABASE_URL"] = database_url
        self.api_key = asyncio.run(_demo_key(database_url))
        queue_url, dlq_url = self._queues(env)
        env["TASKLEASE_QUEUE_URL"] = queue_url
        env["TASKLEASE_DLQ_URL"] = dlq_url

        hook_port = embedded.free_port()
        env["TASKLEASE_WEBHOOK_URL"] = (
            env.get("TASKLEASE_WEBHOOK_URL") or f"http://127.0.0.1:{hook_port}/hook"
        )
        env.setdefault("TASKLEASE_FAKE_MODEL_LOG", str(self.data_dir / "model-calls.jsonl"))
        self.env = {**os.environ, **env}
        os.environ.update(env)
        self.start_webhook(hook_port, self.data_dir / "webhook-deliveries.jsonl")
        self.start_api(self.api_port)
        console.print(f"[green]✓[/] API         {self.api_url}   docs {self.api_url}/docs")
        console.print(
            f"[green]✓[/] API key     tenant [bold]{DEMO_TENANT}[/]: "
            f"[bold]export TASKLEASE_API_KEY={self.api_key}[/]",
            soft_wrap=True,
        )
        for i in range(self.workers):
            self.start_worker(f"worker-{i + 1}", concurrency=2)
        self.start_sweeper()
        console.print(
            f"[green]✓[/] {self.workers} worker processes, 1 sweeper, webhook receiver on :{hook_port}"
            f"   logs in {self.logs_dir}"
        )
        update = {"queue_url": queue_url, "dlq_url": dlq_url, "database_url": database_url}
        resent = asyncio.run(_resend_waiting(s.model_copy(update=update)))
        if resent:
            console.print(
                f"[yellow]↻[/] {resent} unfinished jobs from an earlier run sent to the new queue"
            )

    def _queues(self, env: dict[str, str]) -> tuple[str, str]:
        """The environment's queues, or the queue and DLQ created on moto or LocalStack."""
        s = self.settings
        if s.queue_url and s.dlq_url:
            console.print(f"[green]✓[/] SQS         {s.queue_url} (from the environment)")
            return s.queue_url, s.dlq_url
        with console.status(f"starting {self.sqs}'s SQS server…"):
            try:
                endpoint = self.start_sqs(self.sqs, start_localstack=False)
            except errors.ConfigError as exc:
                raise errors.ConfigError(f"{exc}, or run 'make run SQS=localstack'") from exc
            env.update(embedded.local_aws_env(endpoint, s.region))
            os.environ.update(env)
            urls = self.create_queues(s, s.queue_name)
        label = "LocalStack" if self.sqs == "localstack" else "moto"
        console.print(f"[green]✓[/] SQS         {endpoint} ({label}), queue {s.queue_name} + DLQ")
        return urls.queue_url, urls.dlq_url

    def check(self) -> list[str]:
        return [p.name for p in self.exited()]


async def _demo_key(database_url: str) -> str:
    """A fresh key for this run's demo tenant; the previous runs' demo keys are revoked."""
    async with store.connect(database_url, min_size=1, max_size=1) as database:
        for row in await auth.list_keys(database, DEMO_TENANT):
            if row["name"] == DEMO_KEY_NAME and row["revoked_at"] is None:
                await auth.revoke_key(database, row["id"])
        return (await auth.create_key(database, DEMO_TENANT, name=DEMO_KEY_NAME)).key


async def _resend_waiting(s: Settings) -> int:
    """The messages of jobs an earlier run left waiting: its queue was moto's, now gone."""
    async with (
        store.connect(secrets.database_url(s), min_size=1, max_size=1) as database,
        transport.connect(s) as queue,
    ):
        ids = await store.jobs.waiting_ids(database)
        failed = await queue.send_jobs(ids)
        return len(ids) - len(failed)


def _table(jobs: list[dict[str, Any]], elapsed: float) -> Table:
    table = Table(
        "job",
        "ticket",
        "state",
        "attempt",
        "outcome",
        title=f"demo jobs · {elapsed:4.1f} s",
        title_justify="left",
    )
    for j in jobs:
        outcome = ""
        if j["state"] == JobState.SUCCEEDED and j["result"]:
            outcome = f"{j['result'].get('category')} / {j['result'].get('priority')}"
        elif j["last_error"]:
            outcome = escape(j["last_error"][:70])
        table.add_row(
            str(j["id"])[:8],
            j["payload"].get("ticket_id", ""),
            styled(j["state"]),
            f"{j['attempt']}/{j['max_attempts']}",
            outcome,
        )
    return table


def _client(stack: DevStack, timeout: float) -> httpx.Client:
    return httpx.Client(
        base_url=stack.api_url,
        timeout=timeout,
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )


def _submit_demo(stack: DevStack) -> list[str]:
    ids = []
    with _client(stack, 30) as client:
        for ticket in DEMO_TICKETS:
            resp = client.post(
                "/v1/jobs", json={"kind": "support.triage", "payload": ticket, "max_attempts": 3}
            )
            resp.raise_for_status()
            ids.append(resp.json()["id"])
    return ids


def _watch(stack: DevStack, ids: list[str], timeout: float = 120.0) -> bool:
    start = time.monotonic()
    with (
        _client(stack, 10) as client,
        Live(console=console, refresh_per_second=4) as live,
    ):
        while True:
            jobs = [client.get(f"/v1/jobs/{i}").json() for i in ids]
            live.update(_table(jobs, time.monotonic() - start))
            if all(JobState(j["state"]) in FINAL_FOR_NOW for j in jobs):
                return True
            if time.monotonic() - start > timeout or stack.check():
                return False
            time.sleep(0.25)


def main(
    settings: Settings,
    *,
    workers: int,
    api_port: int,
    data_dir: Path,
    demo: bool,
    exit_when_done: bool,
    sqs: str = "moto",
) -> int:
    stack = DevStack(settings, data_dir, workers, api_port, sqs)
    try:
        # The API and the workers would each refuse a bad TASKLEASE_KINDS into their own
        # log; say it here, naming the module, before anything starts.
        kinds.load(settings)
        stack.start()
        if demo:
            ids = _submit_demo(stack)
            console.print(f"submitted {len(ids)} support.triage jobs through POST /v1/jobs")
            settled = _watch(stack, ids)
            if not settled:
                dead = stack.check()
                console.print(
                    f"[red]the demo jobs did not settle[/]{' (exited: ' + ', '.join(dead) + ')' if dead else ''}"
                )
                return 1
            console.print(
                "[green]all demo jobs settled.[/] One retried after a transient model failure; "
                "one was dead-lettered (see [bold]tasklease jobs list --state dead_lettered[/])."
            )
        if exit_when_done:
            return 0
        console.print(
            f"\nAPI {stack.api_url}   OpenAPI docs {stack.api_url}/docs   — Ctrl-C to stop"
        )
        console.print(
            "try:  export TASKLEASE_API_KEY=…  (printed above), then\n"
            f'      curl -s {stack.api_url}/v1/jobs -H "Authorization: Bearer $TASKLEASE_API_KEY"',
            highlight=False,
        )
        while True:
            dead = stack.check()
            if dead:
                console.print(
                    f"[red]exited unexpectedly: {', '.join(dead)}[/] (logs in {stack.logs_dir})"
                )
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("\nstopping…")
        return 0
    except errors.TaskleaseError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return 2
    finally:
        with contextlib.suppress(Exception):
            stack.stop()
