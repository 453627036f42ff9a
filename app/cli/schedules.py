"""Schedules: `tasklease schedules create|list|pause|resume|delete` (the operator's view:
every tenant's; a new schedule belongs to ``--tenant``). The sweeper makes each slot's job."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

import typer
from rich.markup import escape

from app import errors
from app.cli import listings, render, render_json, render_schedules, runner
from app.cli.render import err, out
from app.services import auth, schedules
from app.services import submit as service
from app.settings import bounds

group = typer.Typer(
    help="Cron schedules: each slot makes one job (the sweeper makes it).", no_args_is_help=True
)


def _schedule_id_or_exit(schedule_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(schedule_id)
    except ValueError as exc:
        err.print(f"[red]not a schedule id:[/] {escape(repr(schedule_id))}")
        raise typer.Exit(2) from exc


@group.command("create")
def create(
    cron: Annotated[
        str, typer.Option(help="five fields: minute hour day-of-month month day-of-week")
    ],
    kind: Annotated[str, typer.Option(help="the job kind each slot makes, e.g. support.triage")],
    tz: Annotated[str, typer.Option(help="the IANA time zone the cron is read in")] = "UTC",
    payload: Annotated[str, typer.Option(help="each job's payload, as JSON")] = "{}",
    name: Annotated[str | None, typer.Option(help="unique among the tenant's schedules")] = None,
    tenant: Annotated[str, typer.Option(help="the tenant the schedule and its jobs belong to")] = (
        service.DEFAULT_TENANT
    ),
    max_attempts: Annotated[
        int | None, typer.Option(min=bounds.MIN_ATTEMPTS, max=bounds.MAX_ATTEMPTS)
    ] = None,
    timeout_seconds: Annotated[
        int | None,
        typer.Option(min=bounds.MIN_TIMEOUT_SECONDS, max=bounds.MAX_TIMEOUT_SECONDS),
    ] = None,
) -> None:
    """Create a schedule (checked like POST /v1/schedules) and print its id; its table,
    with the next slots, goes to stderr."""
    s = runner.settings_or_exit()
    try:
        doc = json.loads(payload)
        auth.check_tenant(tenant)
    except ValueError as exc:
        err.print(f"[red]--payload is not valid JSON:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except errors.BadRequest as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    request = schedules.ScheduleRequest(
        cron=cron,
        timezone=tz,
        kind=kind,
        payload=doc,
        name=name,
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
    )
    made = runner.on_database(
        s, lambda database: schedules.create(s, database, request, tenant=tenant)
    )
    err.print(render_schedules.schedule(made))
    render.plain(str(made["id"]))


@group.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's schedules")] = None,
    limit: Annotated[int, typer.Option(min=1, max=bounds.MAX_PAGE)] = 50,
    as_json: render_json.JsonFlag = False,
) -> None:
    """Every tenant's schedules (or one's), newest first, with their next slot. With
    --json: as GET /v1/schedules answers them (an array)."""
    s = runner.settings_or_exit()
    rows = runner.on_database(
        s, lambda database: schedules.list_schedules(database, scope=tenant, limit=limit)
    )
    if as_json:
        from app.api.schedule_schemas import SchedulePublic

        render_json.emit([SchedulePublic.of(r) for r in rows])
        return
    listings.print_listing(render_schedules.schedules(rows))


@group.command("show")
def show(
    schedule_id: Annotated[str, typer.Argument(help="the schedule's id")],
    as_json: render_json.JsonFlag = False,
) -> None:
    """A schedule: its cron, time zone, kind, payload, next slots and last job. With
    --json: as GET /v1/schedules/{id} answers it."""
    s = runner.settings_or_exit()
    sid = _schedule_id_or_exit(schedule_id)
    row = runner.on_database(s, lambda database: schedules.get(database, sid, scope=None))
    if as_json:
        from app.api.schedule_schemas import SchedulePublic

        render_json.emit(SchedulePublic.of(row))
        return
    out.print(render_schedules.schedule(row))


@group.command("pause")
def pause(schedule_id: Annotated[str, typer.Argument(help="the schedule's id")]) -> None:
    """No slot makes a job until it is resumed."""
    s = runner.settings_or_exit()
    sid = _schedule_id_or_exit(schedule_id)
    runner.on_database(s, lambda database: schedules.pause(database, sid, scope=None))
    out.print(f"schedule {sid}: paused")


@group.command("resume")
def resume(schedule_id: Annotated[str, typer.Argument(help="the schedule's id")]) -> None:
    """Enabled again from the first slot after now (the slots of the pause make no job)."""
    s = runner.settings_or_exit()
    sid = _schedule_id_or_exit(schedule_id)
    row = runner.on_database(s, lambda database: schedules.resume(database, sid, scope=None))
    out.print(render_schedules.schedule(row))


@group.command("delete")
def delete(schedule_id: Annotated[str, typer.Argument(help="the schedule's id")]) -> None:
    """Delete a schedule; the jobs it made stay."""
    s = runner.settings_or_exit()
    sid = _schedule_id_or_exit(schedule_id)
    runner.on_database(s, lambda database: schedules.delete(database, sid, scope=None))
    out.print(f"schedule {sid}: deleted")
