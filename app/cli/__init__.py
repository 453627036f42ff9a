"""The ``tasklease`` command: what operators, tests and ``make run`` drive."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app import config, errors, logs
from app.services import auth, sweeper
from app.services import submit as service
from app.states import JobState, styled
from app.store import pool as db
from app.transport import sqs as queue

T = TypeVar("T")

cli = typer.Typer(
    help="Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
queues_cli = typer.Typer(help="Create the queues.", no_args_is_help=True)
jobs_cli = typer.Typer(help="Look at jobs.", no_args_is_help=True)
dlq_cli = typer.Typer(help="The dead-letter queue.", no_args_is_help=True)
keys_cli = typer.Typer(
    help="API keys: one tenant each; shown once, stored hashed.", no_args_is_help=True
)
limits_cli = typer.Typer(help="Per-tenant limits on job submission.", no_args_is_help=True)
cli.add_typer(queues_cli, name="queues")
cli.add_typer(jobs_cli, name="jobs")
cli.add_typer(dlq_cli, name="dlq")
cli.add_typer(keys_cli, name="keys")
cli.add_typer(limits_cli, name="limits")

out = Console()
err = Console(stderr=True)


def settings_or_exit(**overrides: Any) -> config.Settings:
    try:
        s = config.load(**overrides)
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        raise typer.Exit(2) from exc
    logs.setup(s.log_level)
    return s


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (not on Windows): the worker and the
    sweeper spend their CPU in the loop. uvicorn picks it (and httptools) by itself."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a platform without it
        return None
    return uvloop.new_event_loop


def run(coro: Callable[[], Awaitable[T]]) -> T:
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(coro())  # type: ignore[arg-type]
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        raise typer.Exit(2) from exc
    except errors.TaskleaseError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


@contextlib.asynccontextmanager
async def _clients(s: config.Settings) -> AsyncIterator[tuple[db.Database, queue.Queue]]:
    """The database and the queue, open for one command."""
    s.need("database_url", "queue_url", "dlq_url")
    async with _database(s) as database:
        sqs = queue.Queue(s)
        await sqs.open()
        try:
            yield database, sqs
        finally:
            await sqs.close()


@contextlib.asynccontextmanager
async def _database(s: config.Settings) -> AsyncIterator[db.Database]:
    s.need("database_url")
    database = db.Database(s.database, min_size=1, max_size=4)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


# --- set-up ---------------------------------------------------------------------


@cli.command()
def migrate() -> None:
    """Apply the database migrations (forward-only, safe to run concurrently)."""
    s = settings_or_exit()
    s.need("database_url")
    applied = run(lambda: db.migrate(s.database))
    out.print(f"migrations applied: {', '.join(applied) if applied else 'none (up to date)'}")


@queues_cli.command("create")
def queues_create(
    name: Annotated[
        str | None, typer.Option(help="queue name; default TASKLEASE_QUEUE_NAME")
    ] = None,
) -> None:
    """Create the source queue and its DLQ with the redrive policy; print their URLs."""
    s = settings_or_exit()

    async def go() -> queue.QueueUrls:
        sqs = queue.Queue(s)
        await sqs.open()
        try:
            return await sqs.create_queues(name or s.queue_name)
        finally:
            await sqs.close()

    urls = run(go)
    out.print(f"export TASKLEASE_QUEUE_URL={urls.queue_url}")
    out.print(f"export TASKLEASE_DLQ_URL={urls.dlq_url}")


# --- long-running processes -----------------------------------------------------


@cli.command()
def api(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
) -> None:
    """Serve the HTTP API with uvicorn."""
    import uvicorn

    from app.api import create_app

    s = settings_or_exit()
    try:
        app = create_app(s)
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        raise typer.Exit(2) from exc
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)


@cli.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, max=100, help="batches in flight at once")] = 1,
    max_batches: Annotated[int | None, typer.Option(help="stop after this many batches")] = None,
) -> None:
    """Poll the queue and run jobs (what Lambda's SQS event source mapping does on AWS)."""
    from app.worker.engine import Engine
    from app.worker.event_source_mapping import EventSource

    s = settings_or_exit()

    async def go() -> None:
        engine = await Engine.start(s)
        try:
            await EventSource(s, engine).run(concurrency, max_batches=max_batches)
        finally:
            await engine.close()

    run(go)


@cli.command()
def sweep(
    once: Annotated[bool, typer.Option("--once", help="one pass, then exit")] = False,
) -> None:
    """Mark stalled leases, send unsent outbox rows, re-send lost messages."""
    s = settings_or_exit()

    async def go() -> None:
        async with _clients(s) as (database, sqs):
            while True:
                try:
                    report = await sweeper.sweep_once(s, database, sqs)
                    if once:
                        out.print(f"sweep: {report}")
                        return
                except (errors.StoreError, errors.QueueError) as exc:
                    if once:
                        raise
                    err.print(f"[yellow]sweep failed, will retry:[/] {exc}")
                await asyncio.sleep(s.sweep_interval_seconds)

    with contextlib.suppress(KeyboardInterrupt):
        run(go)


@cli.command("webhook-receiver")
def webhook_receiver(
    port: Annotated[int, typer.Option(help="port to listen on")] = 8081,
    log: Annotated[
        Path | None, typer.Option(help="append each delivery to this JSON-lines file")
    ] = None,
) -> None:
    """A local webhook that records every delivery (the embedded default's outside system)."""
    import uvicorn

    from app.stack.webhook_receiver import create_app

    uvicorn.run(create_app(log), host="127.0.0.1", port=port, log_level="warning")


@cli.command()
def dev(
    workers: Annotated[int, typer.Option(min=1, max=16, help="worker processes")] = 2,
    api_port: Annotated[int, typer.Option(help="API port")] = 8000,
    data_dir: Annotated[
        Path, typer.Option(help="where the embedded PostgreSQL keeps its data")
    ] = Path(".tasklease"),
    demo: Annotated[bool, typer.Option(help="submit the demo jobs")] = True,
    exit_when_done: Annotated[
        bool, typer.Option(help="stop once the demo jobs have settled")
    ] = False,
    sqs: Annotated[
        str,
        typer.Option(
            help="moto (started here) or localstack (already running at LOCALSTACK_ENDPOINT)"
        ),
    ] = "moto",
) -> None:
    """Run everything on this machine: PostgreSQL, SQS (moto), API, workers, sweeper, demo."""
    if sqs not in ("moto", "localstack"):
        err.print(f"[red]--sqs must be moto or localstack, not {sqs!r}[/]")
        raise typer.Exit(2)
    from app.stack import dev as dev_mod

    s = settings_or_exit()
    code = dev_mod.main(
        s,
        workers=workers,
        api_port=api_port,
        data_dir=data_dir,
        demo=demo,
        exit_when_done=exit_when_done,
        sqs=sqs,
    )
    raise typer.Exit(code)


# --- jobs -----------------------------------------------------------------------


@cli.command()
def submit(
    kind: Annotated[str, typer.Argument(help="job kind, e.g. support.triage")],
    payload: Annotated[str, typer.Option(help="the payload, as JSON")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option(help="same key, same job")] = None,
    max_attempts: Annotated[int | None, typer.Option(min=1, max=100)] = None,
    timeout_seconds: Annotated[int | None, typer.Option(min=1)] = None,
    tenant: Annotated[str, typer.Option(help="the tenant the job belongs to")] = (
        service.DEFAULT_TENANT
    ),
) -> None:
    """Submit a job (the same path as POST /v1/jobs, limits included) and print its id."""
    s = settings_or_exit()
    try:
        doc = json.loads(payload)
    except ValueError as exc:
        err.print(f"[red]--payload is not valid JSON:[/] {exc}")
        raise typer.Exit(2) from exc

    async def go() -> service.Submitted:
        async with _clients(s) as (database, sqs):
            return await service.submit(
                s,
                database,
                sqs,
                kind=kind,
                payload=doc,
                max_attempts=max_attempts,
                timeout_seconds=timeout_seconds,
                idempotency_key=idempotency_key,
                tenant=auth.check_tenant(tenant),
            )

    submitted = run(go)
    out.print(str(submitted.job["id"]), highlight=False)
    if not submitted.created:
        err.print("(an earlier submission with this idempotency key)")


@jobs_cli.command("show")
def jobs_show(job_id: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """A job, its timeline and its recorded effects."""
    s = settings_or_exit()
    jid = _job_id_or_exit(job_id)

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        async with _database(s) as database:
            # The operator's view: every tenant.
            job = await service.get_job(database, jid, scope=None)
            return (
                job,
                await service.events(database, jid, scope=None),
                await service.effects(database, jid, scope=None),
            )

    job, events, effects = run(go)
    summary = Table(show_header=False, title=f"job {jid}", title_justify="left")
    for key in (
        "tenant",
        "kind",
        "state",
        "attempt",
        "max_attempts",
        "lease_owner",
        "last_error",
        "created_at",
        "finished_at",
    ):
        value = job[key]
        summary.add_row(
            key, styled(value) if key == "state" else ("" if value is None else str(value))
        )
    summary.add_row("result", json.dumps(job["result"]) if job["result"] is not None else "")
    out.print(summary)
    timeline = Table(
        "at", "from", "to", "attempt", "worker", "detail", title="timeline", title_justify="left"
    )
    for e in events:
        timeline.add_row(
            e["at"].strftime("%H:%M:%S.%f")[:-3],
            e["from_state"] or "",
            styled(e["to_state"]),
            str(e["attempt"]),
            e["worker"] or "",
            e["detail"] or "",
        )
    out.print(timeline)
    fx = Table("#", "key", "attempt", "worker", "recorded", title="effects", title_justify="left")
    for f in effects:
        fx.add_row(
            str(f["seq"]),
            f["key"],
            str(f["attempt"]),
            f["worker"] or "",
            f["recorded_at"].strftime("%H:%M:%S.%f")[:-3],
        )
    out.print(fx)


@jobs_cli.command("list")
def jobs_list(
    state: Annotated[JobState | None, typer.Option(help="only jobs in this state")] = None,
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs")] = None,
    limit: Annotated[int, typer.Option(min=1, max=service.MAX_PAGE)] = 50,
) -> None:
    """The newest jobs of every tenant (or one), as a table."""
    s = settings_or_exit()

    async def go() -> list[dict[str, Any]]:
        async with _database(s) as database:
            rows, _ = await service.list_jobs(
                database, state=state, kind=kind, limit=limit, scope=tenant
            )
            return rows

    rows = run(go)
    table = Table(
        "id",
        "tenant",
        "kind",
        "state",
        "attempt",
        "created",
        "last error",
        title=f"{len(rows)} jobs",
        title_justify="left",
    )
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["tenant"],
            r["kind"],
            styled(r["state"]),
            f"{r['attempt']}/{r['max_attempts']}",
            r["created_at"].strftime("%Y-%m-%d %H:%M:%S"),
            (r["last_error"] or "")[:60],
        )
    out.print(table)


@jobs_cli.command("cancel")
def jobs_cancel(job_id: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """Cancel a job: at once if it is waiting; a running job stops at its next heartbeat."""
    s = settings_or_exit()
    jid = _job_id_or_exit(job_id)

    async def go() -> dict[str, Any]:
        async with _database(s) as database:
            return await service.cancel(database, jid, scope=None)

    job = run(go)
    if job["state"] == JobState.CANCELLED:
        out.print(f"job {jid}: {styled(job['state'])}")
    else:
        out.print(
            f"job {jid}: {styled(job['state'])}, cancel requested: it stops at its next heartbeat"
        )


def _job_id_or_exit(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except ValueError as exc:
        err.print(f"[red]not a job id:[/] {job_id!r}")
        raise typer.Exit(2) from exc


def _dead_letter_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(
        "id",
        "tenant",
        "kind",
        "attempts",
        "by",
        "dead-lettered",
        "last error",
        title=title,
        title_justify="left",
    )
    for r in rows:
        when = r["finished_at"].strftime("%Y-%m-%d %H:%M:%S") if r["finished_at"] else ""
        table.add_row(
            str(r["id"]),
            r["tenant"],
            r["kind"],
            f"{r['attempt']}/{r['max_attempts']}",
            r["dead_lettered_by"] or "",
            when,
            escape((r["last_error"] or "")[:80]),
        )
    return table


@dlq_cli.command("list")
def dlq_list(
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
) -> None:
    """Dead-lettered jobs: kind, attempts, last error, when."""
    from app.services import redrive as redrive_mod

    s = settings_or_exit()

    async def go() -> tuple[list[dict[str, Any]], dict[str, int]]:
        async with _clients(s) as (database, sqs):
            return await redrive_mod.dead_letters(
                database, scope=None, kind=kind, limit=limit
            ), await sqs.depth(s.dlq)

    rows, depth = run(go)
    out.print(_dead_letter_table(rows, f"{len(rows)} dead-lettered jobs"))
    out.print(
        f"messages in the DLQ: {depth.get('ApproximateNumberOfMessages', 0)} visible, "
        f"{depth.get('ApproximateNumberOfMessagesNotVisible', 0)} in flight"
    )


@cli.command()
def redrive(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show what would be redriven; change nothing")
    ] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many jobs")] = None,
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    job: Annotated[
        list[str] | None, typer.Option("--job", help="only this job (repeatable)")
    ] = None,
) -> None:
    """Move dead letters back to the source queue with a fresh attempt budget."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from app.services import redrive as redrive_mod

    s = settings_or_exit()
    ids = [_job_id_or_exit(j) for j in job or []]

    async def go(progress: redrive_mod.Progress | None) -> redrive_mod.RedriveReport:
        async with _clients(s) as (database, sqs):
            return await redrive_mod.redrive(
                s,
                database,
                sqs,
                job_ids=ids or None,
                kind=kind,
                limit=limit,
                dry_run=dry_run,
                progress=progress,
            )

    with Progress(
        TextColumn("redriving"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("redrive", total=None)

        def tick(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        report = run(lambda: go(None if dry_run else tick))
    title = "would redrive" if dry_run else f"redrive ({report.mode})"
    out.print(
        _dead_letter_table(
            report.selected, f"{title}: {len(report.selected)} dead-lettered jobs selected"
        )
    )
    if dry_run:
        out.print("dry run: nothing changed")
        return
    summary = Table(
        "moved from the DLQ",
        "jobs reset",
        "sent anew (no dead letter found)",
        "stale deleted",
        "left in the DLQ",
        title="summary",
        title_justify="left",
    )
    summary.add_row(
        str(report.moved),
        str(report.reset),
        str(report.sent_without_dead_letter),
        str(report.stale_deleted),
        str(report.left_in_dlq),
    )
    out.print(summary)
    if report.mode == "StartMessageMoveTask":
        out.print(
            "moved with StartMessageMoveTask: each job's attempt budget restarts when its message is claimed"
        )


# --- keys and limits ------------------------------------------------------------


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _keys_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table("key id", "tenant", "name", "scope", "created", "revoked", title=title)
    table.title_justify = "left"
    for r in rows:
        table.add_row(
            r["id"],
            r["tenant"],
            escape(r["name"]),
            "[bold]admin[/]" if r["admin"] else "tenant",
            _when(r["created_at"]),
            f"[red]{_when(r['revoked_at'])}[/]" if r["revoked_at"] else "",
        )
    return table


@keys_cli.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="the tenant the key acts for")],
    name: Annotated[str, typer.Option(help="a label, e.g. who holds the key")] = "",
    admin: Annotated[
        bool, typer.Option("--admin", help="operator scope: every tenant's jobs, bulk redrive")
    ] = False,
) -> None:
    """Create an API key and print it. It is shown once; only a hash is stored."""
    s = settings_or_exit()

    async def go() -> auth.NewKey:
        async with _database(s) as database:
            return await auth.create_key(database, tenant, name=name, admin=admin)

    made = run(go)
    err.print(_keys_table([made.row], "created (the key below is shown once: keep it now)"))
    out.print(made.key, highlight=False, soft_wrap=True)


@keys_cli.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's keys")] = None,
) -> None:
    """Every key: id, tenant, scope, when made and revoked (never the key itself)."""
    s = settings_or_exit()

    async def go() -> list[dict[str, Any]]:
        async with _database(s) as database:
            return await auth.list_keys(database, tenant)

    rows = run(go)
    out.print(_keys_table(rows, f"{len(rows)} API keys"))


@keys_cli.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the key's id (keys list)")]) -> None:
    """Revoke a key: the next request that carries it is refused."""
    s = settings_or_exit()

    async def go() -> dict[str, Any]:
        async with _database(s) as database:
            return await auth.revoke_key(database, key_id)

    row = run(go)
    out.print(_keys_table([row], "revoked"))


@limits_cli.command("set")
def limits_set(
    tenant: Annotated[str, typer.Argument(help="the tenant")],
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="jobs per second, refilled steadily")
    ] = None,
    burst: Annotated[int | None, typer.Option(min=1, help="jobs at once after a pause")] = None,
    max_in_flight: Annotated[
        int | None, typer.Option(min=1, help="unfinished jobs the tenant may have")
    ] = None,
) -> None:
    """Override the deployment's limits for one tenant (the ones not given stay)."""
    s = settings_or_exit()
    _valid_tenant_or_exit(tenant)

    async def go() -> list[dict[str, Any]]:
        async with _database(s) as database:
            await database.fetch(
                db.q("set_tenant_limits"),
                {
                    "tenant": tenant,
                    "rate_per_second": rate,
                    "burst": burst,
                    "max_in_flight": max_in_flight,
                },
            )
            return await database.fetch(db.q("list_tenant_limits"))

    _print_limits(s, [r for r in run(go) if r["tenant"] == tenant])


@limits_cli.command("clear")
def limits_clear(tenant: Annotated[str, typer.Argument(help="the tenant")]) -> None:
    """Drop a tenant's overrides: it gets the deployment's defaults again."""
    s = settings_or_exit()

    async def go() -> list[dict[str, Any]]:
        async with _database(s) as database:
            return await database.fetch(db.q("clear_tenant_limits"), {"tenant": tenant})

    cleared = run(go)
    out.print(f"{tenant}: {'back to the defaults' if cleared else 'had no overrides'}")


@limits_cli.command("list")
def limits_list() -> None:
    """Each tenant's limits (override or default) and its unfinished jobs."""
    s = settings_or_exit()

    async def go() -> list[dict[str, Any]]:
        async with _database(s) as database:
            return await database.fetch(db.q("list_tenant_limits"))

    _print_limits(s, run(go))


def _print_limits(s: config.Settings, rows: list[dict[str, Any]]) -> None:
    def value(override: Any, default: Any) -> str:
        return f"[bold]{override:g}[/]" if override is not None else f"{default:g} (default)"

    table = Table("tenant", "jobs/s", "burst", "max in flight", "in flight now")
    table.title = "per-tenant limits on POST /v1/jobs"
    table.title_justify = "left"
    for r in rows:
        table.add_row(
            r["tenant"],
            value(r["rate_per_second"], s.rate_limit_per_second),
            value(r["burst"], s.rate_limit_burst),
            value(r["max_in_flight"], s.max_jobs_in_flight),
            str(r["in_flight"]),
        )
    out.print(table)


def _valid_tenant_or_exit(tenant: str) -> None:
    try:
        auth.check_tenant(tenant)
    except errors.BadRequest as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


@cli.command()
def chaos(
    jobs: Annotated[int, typer.Option(min=1, help="support.triage jobs to submit")] = 200,
    workers: Annotated[int, typer.Option(min=1, max=16, help="worker processes")] = 3,
    sqs: Annotated[str, typer.Option(help="moto (started here) or localstack")] = "moto",
    transient_rate: Annotated[float, typer.Option(min=0, max=1, help="fake model")] = 0.2,
    permanent_rate: Annotated[float, typer.Option(min=0, max=1, help="fake model")] = 0.05,
    slow_rate: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="share of workers whose model calls outlast the visibility timeout"
        ),
    ] = 0.1,
    tagged_rate: Annotated[
        float,
        typer.Option(min=0, max=0.5, help="tickets tagged [permanent], and as many [transient:N]"),
    ] = 0.02,
    kill_every: Annotated[float, typer.Option(min=0.5, help="SIGKILL a worker every N s")] = 3.0,
    fault_seconds: Annotated[float, typer.Option(min=1, help="how long faults go on")] = 20.0,
    seed: Annotated[int, typer.Option(help="tickets, tags and victims")] = 1,
    data_dir: Annotated[Path, typer.Option(help="wiped at start")] = Path(".tasklease/chaos"),
    visibility: Annotated[int, typer.Option(min=1, max=60, help="visibility timeout, s")] = 4,
    max_attempts: Annotated[int, typer.Option(min=1, max=10, help="attempt budget per job")] = 3,
    clients: Annotated[int, typer.Option(min=1, max=64, help="concurrent HTTP clients")] = 8,
    drain_timeout: Annotated[float, typer.Option(min=1, help="per drain, s")] = 300.0,
) -> None:
    """The chaos gate: jobs under worker kills and broker/database restarts, then a Jepsen-style check."""
    from app import chaos as chaos_mod

    logs.setup("WARNING")
    code = chaos_mod.main(
        chaos_mod.Config(
            jobs=jobs,
            workers=workers,
            sqs=sqs,
            transient_rate=transient_rate,
            permanent_rate=permanent_rate,
            slow_rate=slow_rate,
            tagged_rate=tagged_rate,
            kill_every=kill_every,
            fault_seconds=fault_seconds,
            seed=seed,
            data_dir=data_dir,
            visibility=visibility,
            max_attempts=max_attempts,
            clients=clients,
            drain_timeout=drain_timeout,
        )
    )
    raise typer.Exit(code)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
