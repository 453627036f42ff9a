"""The long-running processes: the API, a worker, the sweeper, the local webhook receiver,
`tasklease dev` (the whole stack on this machine) and `tasklease chaos`. Their heavy imports
(uvicorn, FastAPI, the engine, the stack) happen in the command that needs them."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from app import errors, logs, tracing
from app.cli import runner
from app.cli.render import err, out
from app.services import sweeper
from app.settings import config


def api(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
) -> None:
    """Serve the HTTP API with uvicorn."""
    import uvicorn

    from app.api import create_app

    s = runner.settings_or_exit(dev_state=False, serves=True)
    with runner.errors_exit():
        app = create_app(s)
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)


async def _work(s: config.Settings, concurrency: int, max_batches: int | None) -> None:
    from app.worker.event_source_mapping import EventSource

    async with runner.engine(s) as engine:
        await EventSource(s, engine).run(concurrency, max_batches=max_batches)


def worker(
    concurrency: Annotated[int, typer.Option(min=1, max=100, help="batches in flight at once")] = 1,
    max_batches: Annotated[int | None, typer.Option(help="stop after this many batches")] = None,
) -> None:
    """Poll the queue and run jobs (what Lambda's SQS event source mapping does on AWS)."""
    s = runner.settings_or_exit(dev_state=False, serves=True)
    with runner.errors_exit():
        serve_metrics(s)
    runner.run(lambda: _work(s, concurrency, max_batches))


def serve_metrics(s: config.Settings) -> None:
    """GET /metrics on TASKLEASE_METRICS_PORT (a thread of this process), unless it is 0;
    a port that cannot be had stops start-up."""
    if not s.metrics_port:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(s.metrics_port, addr=s.metrics_host)
    except OSError as exc:
        raise errors.ConfigError(
            f"TASKLEASE_METRICS_PORT={s.metrics_port} (TASKLEASE_METRICS_HOST={s.metrics_host}): "
            f"cannot listen: {exc}"
        ) from exc


async def _sweep(s: config.Settings, c: runner.Clients, once: bool) -> None:
    """Sweep every interval until stopped; a failed pass is retried, unless it was the one."""
    while True:
        try:
            report = await sweeper.sweep_once(s, c.database, c.queue)
            if once:
                out.print(f"sweep: {escape(str(report))}")
                return
        except (errors.StoreError, errors.QueueError) as exc:
            if once:
                raise
            err.print(f"[yellow]sweep failed, will retry:[/] {escape(str(exc))}")
        await asyncio.sleep(s.sweep_interval_seconds)


def sweep(
    once: Annotated[bool, typer.Option("--once", help="one pass, then exit")] = False,
) -> None:
    """Make schedules' due jobs, mark stalled leases, send unsent outbox rows, re-send lost
    messages."""
    from app import kinds  # here, not at import: every other command starts without it

    s = runner.settings_or_exit(dev_state=False, serves=True)
    with runner.errors_exit():
        tracing.configure("tasklease-sweeper")
        kinds.load(s)  # schedules make jobs of these kinds: a bad or empty list is said now
    with contextlib.suppress(KeyboardInterrupt):
        runner.on_clients(s, lambda c: _sweep(s, c, once))


def webhook_receiver(
    port: Annotated[int, typer.Option(help="port to listen on")] = 8081,
    log: Annotated[
        Path | None, typer.Option(help="append each delivery to this JSON-lines file")
    ] = None,
) -> None:
    """A local webhook that records every delivery (the embedded default's outside system)."""
    import uvicorn

    from app.tools.stack.webhook_receiver import create_app

    uvicorn.run(create_app(log), host="127.0.0.1", port=port, log_level="warning")


def dev(
    workers: Annotated[int, typer.Option(min=1, max=16, help="worker processes")] = 2,
    api_port: Annotated[int, typer.Option(min=1, max=65535, help="API port")] = 8000,
    sqs_port: Annotated[
        int, typer.Option(min=1, max=65535, help="port of moto's SQS server (--sqs moto)")
    ] = 9324,
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
    transport: Annotated[
        str,
        typer.Option(
            help="sqs (moto or LocalStack, --sqs) or redis (TASKLEASE_REDIS_URL's server, "
            "else an embedded one)"
        ),
    ] = "",
    new_key: Annotated[
        bool,
        typer.Option(
            "--new-key",
            help="make a new API key for the tenant demo and revoke the previous one (without "
            "it, the key kept in DATA_DIR/api-key is used again, so an exported "
            "TASKLEASE_API_KEY and open web-view tabs keep working across restarts)",
        ),
    ] = False,
    reload: Annotated[
        bool,
        typer.Option(
            "--reload",
            help="restart the API, the workers and the sweeper when a .py file of the kinds "
            "changes (the modules TASKLEASE_KINDS names, and the demos')",
        ),
    ] = False,
) -> None:
    """Run everything on this machine: PostgreSQL, the carrier (moto's SQS, LocalStack or
    Redis), API, workers, sweeper, demo.

    The demo key is kept from run to run (--new-key replaces it); --reload restarts the
    processes that load your kinds when you edit them: make run ARGS=--reload."""
    if sqs not in ("moto", "localstack"):
        err.print(f"[red]--sqs must be moto or localstack, not {escape(repr(sqs))}[/]")
        raise typer.Exit(2)
    if transport not in ("", "sqs", "redis"):
        err.print(f"[red]--transport must be sqs or redis, not {escape(repr(transport))}[/]")
        raise typer.Exit(2)
    from app.tools.stack import dev as dev_mod
    from app.tools.stack.stack import with_demo_kinds

    if demo:  # the demos are kinds like any other: named in TASKLEASE_KINDS, beside yours
        with_demo_kinds()
    # Not the state file: that is this command's output, not its input.
    s = runner.settings_or_exit(dev_state=False, serves=True)
    code = dev_mod.main(
        s,
        workers=workers,
        api_port=api_port,
        sqs_port=sqs_port,
        data_dir=data_dir,
        demo=demo,
        exit_when_done=exit_when_done,
        sqs=sqs,
        transport=transport or s.transport,
        new_key=new_key,
        reload_kinds=reload,
    )
    raise typer.Exit(code)


def env(
    data_dir: Annotated[
        Path, typer.Option(help="the data directory of the running `tasklease dev`")
    ] = Path(".tasklease"),
) -> None:
    """Print the running `make run` stack's settings as export lines: eval "$(uv run tasklease env)"."""
    from app.tools.stack import state

    running = state.read(data_dir)
    if running is None or not running.alive:
        why = "is not running" if running is not None else f"wrote no {state.path(data_dir)}"
        err.print(f"[red]no running `make run`:[/] it {escape(why)}", highlight=False)
        raise typer.Exit(1)
    sys.stdout.write(state.export_lines(running.env))  # plain: for a shell, never wrapped


def chaos(
    jobs: Annotated[int, typer.Option(min=1, help="jobs to submit")] = 200,
    waiting: Annotated[
        float,
        typer.Option(min=0, max=1, help="share of the jobs that wait: naps, approvals, fan-outs"),
    ] = 0.3,
    agents: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="share of the jobs that are agent runs (Pydantic AI and the OpenAI Agents "
            "SDK: needs the pydantic-ai and openai-agents extras when above 0)",
        ),
    ] = 0.1,
    workers: Annotated[int, typer.Option(min=1, max=16, help="worker processes")] = 3,
    max_running: Annotated[
        int, typer.Option(min=1, help="the tenant's running cap (below the workers' 2 slots each)")
    ] = 4,
    transport: Annotated[
        str, typer.Option(help="the carrier: sqs, or redis (an embedded redis-server of its own)")
    ] = "sqs",
    sqs: Annotated[str, typer.Option(help="moto (started here) or localstack")] = "moto",
    redis_persistence: Annotated[
        str,
        typer.Option(
            help="on redis, its restarts: aof (AOF on, appendfsync everysec), none (nothing "
            "on disk: the restart loses every message), both (one of each, AOF first)"
        ),
    ] = "both",
    transient_rate: Annotated[float, typer.Option(min=0, max=1, help="fake model")] = 0.2,
    permanent_rate: Annotated[float, typer.Option(min=0, max=1, help="fake model")] = 0.05,
    throttle_rate: Annotated[
        float, typer.Option(min=0, max=1, help="fake model: share of calls answered 429")
    ] = 0.1,
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
    """The chaos gate: jobs under worker kills and carrier/database restarts, then a Jepsen-style check."""
    from app.tools import chaos as chaos_mod
    from app.tools.stack.stack import with_demo_kinds

    with_demo_kinds()  # the gate's jobs are the demos' kinds
    logs.setup("WARNING")
    code = chaos_mod.main(
        chaos_mod.Config(
            jobs=jobs,
            waiting=waiting,
            agents=agents,
            workers=workers,
            max_running=max_running,
            transport=transport,
            sqs=sqs,
            redis_persistence=redis_persistence,
            transient_rate=transient_rate,
            permanent_rate=permanent_rate,
            throttle_rate=throttle_rate,
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
