"""The ``tasklease`` command: every command and group, registered in the order `--help`
lists them. The commands themselves live in one module per group."""

from __future__ import annotations

from typing import Annotated

import typer

from app import __version__
from app.cli import (
    alerts,
    bulk,
    callbacks,
    charts,
    cost,
    dead_letters,
    jobs,
    keys,
    kinds,
    limits,
    prune,
    queues,
    reruns,
    runner,
    schedules,
    serve,
    watch,
    workers,
)

cli = typer.Typer(
    help="Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@cli.callback(invoke_without_command=True)
def options(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v",
            "--verbose",
            help="print log lines (JSON, on stderr); without it only the servers (api, "
            "worker, sweep, dev) print them",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            help="print tasklease's version and stop",
        ),
    ] = False,
) -> None:
    """Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL."""
    if version:
        typer.echo(f"tasklease {__version__}")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    runner.verbose(verbose)


cli.command()(queues.migrate)
cli.command()(serve.api)
cli.command()(serve.worker)
cli.command()(serve.sweep)
cli.command("webhook-receiver")(serve.webhook_receiver)
cli.command()(serve.dev)
cli.command()(serve.env)
cli.command()(jobs.submit)
cli.command()(kinds.kinds)
cli.command()(workers.workers)
cli.command()(dead_letters.redrive)
cli.command()(prune.prune)
cli.command()(serve.chaos)
cli.command()(cost.cost)
cli.command()(charts.charts)
cli.add_typer(queues.group, name="queues")
jobs.group.command("watch")(watch.watch)
jobs.group.command("rerun")(reruns.rerun)
jobs.group.command("fork")(reruns.fork)
jobs.group.command("search")(bulk.search)
jobs.group.add_typer(bulk.group, name="bulk")
cli.add_typer(jobs.group, name="jobs")
cli.add_typer(callbacks.group, name="callbacks")
cli.add_typer(dead_letters.group, name="dlq")
cli.add_typer(schedules.group, name="schedules")
cli.add_typer(keys.group, name="keys")
cli.add_typer(limits.group, name="limits")
cli.add_typer(alerts.group, name="alerts")


def main() -> None:
    cli()
