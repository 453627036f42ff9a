"""Callbacks: `tasklease callbacks complete|heartbeat`, for a person at a terminal answering
a job that waits (the same path as POST /v1/callbacks/{token}). An operator without the
token names the job and the callback's key instead: the CLI has the database, and so
derives the token the job handed out (app/services/callbacks.token_for)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from rich.text import Text

from app import errors
from app.cli import render, runner
from app.cli.jobs import job_id_or_exit, json_or_exit
from app.cli.render import err, out
from app.services import callbacks
from app.store.pool import Database

group = typer.Typer(help="Answer the callbacks jobs wait for.", no_args_is_help=True)

TokenArg = Annotated[
    str | None,
    typer.Argument(help="the callback's token (or name it with --job and --key)"),
]
JobOpt = Annotated[str | None, typer.Option("--job", help="the waiting job's id (with --key)")]
KeyOpt = Annotated[str | None, typer.Option("--key", help="the callback's key (with --job)")]


def _target_or_exit(
    token: str | None, job: str | None, key: str | None
) -> tuple[str | None, uuid.UUID | None, str | None]:
    """A token, or a job id and a key: exactly one of the two ways."""
    if token is not None and (job is not None or key is not None):
        err.print("[red]give a TOKEN, or --job and --key, not both[/]")
        raise typer.Exit(2)
    if token is None:
        if job is None or key is None:
            err.print("[red]give the callback's TOKEN, or --job ID and --key KEY[/]")
            raise typer.Exit(2)
        return None, job_id_or_exit(job), key
    return token, None, None


async def _token(
    database: Database, token: str | None, job: uuid.UUID | None, key: str | None
) -> str:
    if token is not None:
        return token
    if job is None or key is None:  # pragma: no cover - _target_or_exit made sure
        raise errors.BadRequest("give the callback's token, or its job and key")
    return await callbacks.token_for(database, job, key)


@group.command("complete")
def complete(
    token: TokenArg = None,
    job: JobOpt = None,
    key: KeyOpt = None,
    result: Annotated[str | None, typer.Option(help="the answer, as JSON")] = None,
    error: Annotated[str | None, typer.Option(help="fail the callback with this message")] = None,
) -> None:
    """Answer a callback with --result JSON, or fail it with --error MSG. Exit 1 when the
    callback is unknown, past its deadline or answered already (the reason is printed)."""
    target = _target_or_exit(token, job, key)
    if (result is None) == (error is None):
        err.print("[red]give --result JSON or --error MESSAGE (exactly one)[/]")
        raise typer.Exit(2)
    answer: Any = None if result is None else json_or_exit(result, "--result")
    s = runner.settings_or_exit()

    async def work(c: runner.Clients) -> callbacks.Answered:
        tok = await _token(c.database, *target)
        return await callbacks.answer(c.database, c.queue, tok, result=answer, error=error)

    done = runner.on_clients(s, work)
    ok = done.callback_state == "succeeded"
    line = Text.assemble(
        f"callback {done.key} of job {done.job_id}: the callback ",
        render.cell(done.callback_state, "green" if ok else "red"),
    )
    line.append(", the job is woken" if done.job_woken else ", the job was not waiting on it")
    out.print(line)


@group.command("heartbeat")
def heartbeat(token: TokenArg = None, job: JobOpt = None, key: KeyOpt = None) -> None:
    """Push a callback's deadline by its timeout; prints the new deadline. Exit 1 when the
    callback is unknown, past its deadline or answered already."""
    target = _target_or_exit(token, job, key)
    s = runner.settings_or_exit()

    async def work(database: Database) -> Any:
        return await callbacks.heartbeat(database, await _token(database, *target))

    deadline = runner.on_database(s, work)
    out.print(Text(f"new deadline: {render.when(deadline)}"))
