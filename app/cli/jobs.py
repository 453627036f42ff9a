"""Jobs: `tasklease submit` and `tasklease jobs show|list|cancel|send` (the operator's
view: every tenant unless one is named)."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from typing import Annotated, Any, NamedTuple

import typer
from rich.markup import escape
from rich.text import Text

from app.cli import bulk, listings, remote, render, render_flow, render_json, render_reruns, runner
from app.cli.render import err, out
from app.priorities import Priority
from app.services import auth, costs, jobs, messages, reruns
from app.services import state as published
from app.services import submit as service
from app.settings import bounds
from app.settings.config import Settings
from app.states import JobState
from app.store.messages import Message
from app.store.pool import Database

group = typer.Typer(help="Look at jobs.", no_args_is_help=True)


def job_id_or_exit(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except ValueError as exc:
        err.print(f"[red]not a job id:[/] {escape(repr(job_id))}")
        raise typer.Exit(2) from exc


def json_or_exit(text: str, what: str) -> Any:
    """``text`` read as JSON, or exit 2 saying that ``what`` is not."""
    try:
        return json.loads(text)
    except ValueError as exc:
        err.print(f"[red]{what} is not valid JSON:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def submit(
    kind: Annotated[str, typer.Argument(help="job kind, e.g. support.triage")],
    payload: Annotated[str, typer.Option(help="the payload, as JSON")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option(help="same key, same job")] = None,
    max_attempts: Annotated[
        int | None, typer.Option(min=bounds.MIN_ATTEMPTS, max=bounds.MAX_ATTEMPTS)
    ] = None,
    timeout_seconds: Annotated[
        int | None,
        typer.Option(min=bounds.MIN_TIMEOUT_SECONDS, max=bounds.MAX_TIMEOUT_SECONDS),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            help="the tenant the job belongs to (default: the tenant of the key in "
            f"${remote.API_KEY}, as a running `make run` gives it; else "
            f"{service.DEFAULT_TENANT!r})"
        ),
    ] = None,
    delay: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=bounds.MAX_DELAY_SECONDS,
            help="run it this many seconds from now (it waits meanwhile)",
        ),
    ] = None,
    run_at: Annotated[
        str | None,
        typer.Option(help="run it at this time: ISO 8601 with a time zone (2026-12-24T18:00Z)"),
    ] = None,
    priority: Annotated[
        Priority,
        typer.Option(help="which queue serves it: high first, low with what is left"),
    ] = Priority.NORMAL,
    deadline_seconds: Annotated[
        float | None,
        typer.Option(
            max=bounds.MAX_DEADLINE_SECONDS,
            help="the whole run's deadline, this many seconds from now: past it the job "
            "ends dead-lettered, 'deadline passed', its children cancelled",
        ),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(help="the whole run's deadline as a time: ISO 8601 with a time zone"),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="submit through the HTTP API, follow the job until it is finished and print "
            "its result (exit 1 unless it succeeded)",
        ),
    ] = False,
    wait_timeout: Annotated[
        float, typer.Option(min=0.1, help="--wait: give up after this many seconds")
    ] = 3600.0,
    api_url: Annotated[
        str | None, typer.Option(help=f"--wait: the API's URL (default ${remote.API_URL})")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help=f"--wait: an API key (default ${remote.API_KEY})")
    ] = None,
) -> None:
    """Submit a job (the same path as POST /v1/jobs, limits included) and print its id.
    With --wait, submit it through the HTTP API (the key decides the tenant) and wait."""
    try:
        doc = json.loads(payload)
    except ValueError as exc:
        err.print(f"[red]--payload is not valid JSON:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if delay is not None and run_at is not None:
        err.print("[red]give --delay or --run-at, not both[/]")
        raise typer.Exit(2)
    when_ = _run_at_or_exit(run_at) if run_at is not None else None
    by = _run_at_or_exit(deadline, "--deadline") if deadline is not None else None
    if wait:
        if tenant is not None:
            err.print("[red]--tenant does not apply with --wait:[/] the API key decides the tenant")
            raise typer.Exit(2)
        url, key = remote.connection_or_exit(api_url, api_key)
        remote.submit_and_wait(
            url,
            key,
            kind=kind,
            payload=doc,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            timeout_seconds=timeout_seconds,
            run_at=when_,
            delay=delay,
            wait_timeout=wait_timeout,
            priority=priority.value,
            deadline=by,
            deadline_seconds=deadline_seconds,
        )
        return
    s = runner.settings_or_exit()
    chosen: list[str] = []

    async def go(c: runner.Clients) -> service.Submitted:
        if tenant is not None:
            chosen.append(f"tenant {auth.check_tenant(tenant)}")
            owner = tenant
        else:
            # The tenant the API and the web view would show the job under.
            key = os.environ.get(remote.API_KEY)
            owner = (await auth.tenant_of(c.database, key) if key else None) or ""
            chosen.append(
                f"tenant {owner} (the key's in ${remote.API_KEY})"
                if owner
                else f"tenant {service.DEFAULT_TENANT} (no --tenant, no key in ${remote.API_KEY})"
            )
            owner = owner or service.DEFAULT_TENANT
        return await service.submit(
            s,
            c.database,
            c.queue,
            kind=kind,
            payload=doc,
            max_attempts=max_attempts,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key,
            tenant=owner,
            run_at=when_,
            delay_seconds=delay,
            priority=priority.value,
            deadline=by,
            deadline_seconds=deadline_seconds,
        )

    submitted = runner.on_clients(s, go)
    err.print(escape(chosen[0]), highlight=False)
    render.plain(str(submitted.job["id"]))
    if not submitted.created:
        err.print("(an earlier submission with this idempotency key)")


def _run_at_or_exit(text: str, option: str = "--run-at") -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        err.print(f"[red]{option} is not an ISO 8601 time:[/] {escape(repr(text))}")
        raise typer.Exit(2) from exc
    if value.tzinfo is None:
        err.print(
            f"[red]{option} needs a time zone:[/] add Z or an offset, "
            f"e.g. {escape(text)}Z or {escape(text)}+01:00"
        )
        raise typer.Exit(2)
    return value


class JobView(NamedTuple):
    job: dict[str, Any]
    events: list[dict[str, Any]]
    effects: list[dict[str, Any]]
    children: list[dict[str, Any]]
    children_count: int
    callbacks: list[dict[str, Any]]
    usage: dict[str, Any]
    messages: list[Message]
    state: list[dict[str, Any]]
    reruns: list[dict[str, Any]]
    key: dict[str, Any] | None  # where a keyed job stands on its key (None: no key)


async def _view(s: Settings, database: Database, job_id: uuid.UUID) -> JobView:
    # The operator's view: every tenant.
    children, count = await jobs.children(database, job_id, scope=None)
    job = await jobs.get_job(database, job_id, scope=None)
    return JobView(
        job,
        await jobs.events(database, job_id, scope=None),
        await jobs.effects(database, job_id, scope=None),
        children,
        count,
        await jobs.callbacks(database, job_id, scope=None),
        await costs.of_job(s, database, job_id),
        await messages.of_job(database, job_id, scope=None),
        await published.of_job(database, job_id, scope=None),
        await reruns.reruns_of(database, job_id, scope=None),
        await jobs.key_status(database, job),
    )


def usage_line(usage: dict[str, Any]) -> str:
    """A job's model usage in one line: tokens, estimated cost, by model."""
    cost = usage["cost_usd"]
    shown = "cost unknown (a model has no price)" if cost is None else f"est. ${cost:.6f}"
    models = ", ".join(
        f"{m['model']} x{m['calls']}: {m['input_tokens']} in / {m['output_tokens']} out"
        for m in usage["models"]
    )
    return (
        f"Model usage: {usage['input_tokens']} input + {usage['output_tokens']} output "
        f"tokens, {shown} ({models})"
    )


def _view_json(view: JobView) -> dict[str, Any]:
    """``jobs show --json``: each part as the API answers it (GET /v1/jobs/{id} and its
    /events, /effects, /callbacks, /state and /messages), and for a keyed job where it
    stands on its key (``key``; a job without a key has none, its document is the API's)."""
    from app.api.callback_schemas import CallbackPublic
    from app.api.message_schemas import MessagePublic
    from app.api.routes.state import StatePage, StatePublic
    from app.api.schemas import EffectPublic, EventPublic, JobDetail

    return {
        "job": JobDetail.with_children(
            view.job, view.children, view.children_count, view.usage, view.reruns, view.key
        ),
        "events": [EventPublic.model_validate(e) for e in view.events],
        "effects": [EffectPublic.model_validate(e) for e in view.effects],
        "callbacks": [CallbackPublic.model_validate(c) for c in view.callbacks],
        "state": StatePage(items=[StatePublic.model_validate(r) for r in view.state]),
        "messages": [MessagePublic.of(m) for m in view.messages],
        **({"key": view.key} if view.key is not None else {}),
    }


@group.command("show")
def show(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    as_json: render_json.JsonFlag = False,
) -> None:
    """A job (what it waits for, its parent, the job it re-runs or was forked from), its
    timeline, its recorded effects (a fork's inherited ones marked), its callbacks, the
    state it published, its children, its messages and its re-runs and forks; a keyed
    job's key, its limits and whether it waits for its key. With --json: an object of the
    API's answers, {"job", "events", "effects", "callbacks", "state", "messages"}, and
    for a keyed job "key": {"key", "concurrency", "rate", "holding", "queued_ahead",
    "open", "waits_for_key", "waits_for_rate"}."""
    s = runner.settings_or_exit()
    jid = job_id_or_exit(job_id)
    view = runner.on_database(s, lambda database: _view(s, database, jid))
    if as_json:
        render_json.emit(_view_json(view))
        return
    out.print(render.job(jid, view.job, jobs.waiting_for(view.job), jobs.lease_holder(view.job)))
    came_from = render_reruns.origin(view.job)
    if came_from is not None:
        out.print(came_from)
    if view.key is not None:
        out.print(render_flow.key_table(view.key))
    out.print(render.timeline(view.events))
    out.print(render.effects(view.effects))
    if view.usage["models"]:
        out.print(usage_line(view.usage), markup=False, highlight=False)
    if view.callbacks:
        out.print(render.callbacks(view.callbacks))
    if view.state:
        out.print(render.published_state(view.state))
    if view.children_count:
        listings.print_listing(listings.children(view.children, view.children_count))
    if view.messages:
        out.print(render.messages(view.messages))
    if view.reruns:
        out.print(render_reruns.made_from(view.reruns))


@group.command("list")
def list_(
    state: Annotated[JobState | None, typer.Option(help="only jobs in this state")] = None,
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs")] = None,
    key: Annotated[
        str | None,
        typer.Option(help="only the jobs of this flow-control key (of any kind unless --kind)"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=bounds.MAX_PAGE)] = 50,
    as_json: render_json.JsonFlag = False,
) -> None:
    """The newest jobs of every tenant (or one), as a table; with --json, as GET /v1/jobs
    answers them ({"items", "next_cursor"})."""
    s = runner.settings_or_exit()
    flt = bulk.filter_or_exit(
        payload=None, payload_json=None, states=[state] if state else None, kind=kind, key=key
    )
    rows, cursor = runner.on_database(
        s, lambda database: jobs.search(database, flt, limit=limit, scope=tenant)
    )
    if as_json:
        from app.api.schemas import JobPage, JobPublic

        render_json.emit(JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=cursor))
        return
    listings.print_listing(listings.jobs([{**r, "waiting_for": jobs.waiting_for(r)} for r in rows]))


@group.command("cancel")
def cancel(job_id: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """Cancel a job: at once if it is waiting; a running job's worker is told at once
    and stops it (at its next heartbeat at the latest)."""
    s = runner.settings_or_exit()
    jid = job_id_or_exit(job_id)
    job = runner.on_database(s, lambda database: jobs.cancel(database, jid, scope=None))
    line = Text.assemble(f"job {jid}: ", render.state(job["state"]))
    if job["state"] != JobState.CANCELLED:
        line.append(", cancel requested: its worker stops it now (next heartbeat at the latest)")
    out.print(line)


@group.command("send")
def send(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    topic: Annotated[str, typer.Argument(help="the topic its ctx.receive(topic) reads")],
    body: Annotated[str, typer.Argument(help="the message: any JSON")] = "null",
    key: Annotated[
        str | None,
        typer.Option(
            "--key", help="an Idempotency-Key: sent again with it, the message is not stored twice"
        ),
    ] = None,
) -> None:
    """Send a job a message (as POST /v1/jobs/{id}/messages): its code reads it with
    ctx.receive(TOPIC); a job waiting on the topic is woken. Exit 1 when the job is
    unknown, finished, or at its limit of messages (the reason is printed)."""
    jid = job_id_or_exit(job_id)
    value = json_or_exit(body, "BODY")
    s = runner.settings_or_exit()

    async def work(c: runner.Clients) -> messages.Sent:
        return await messages.send(
            c.database, c.queue, jid, scope=None, topic=topic, body=value, idempotency_key=key
        )

    sent = runner.on_clients(s, work)
    line = Text(f"message {sent.message.id} to job {jid} on {topic!r}: ")
    if not sent.created:
        line.append("sent before with this key, not stored again")
    else:
        line.append("stored, the job is woken" if sent.job_woken else "stored")
    out.print(line)
