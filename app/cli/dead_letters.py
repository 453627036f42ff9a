"""Dead letters: `tasklease dlq list` and `tasklease redrive`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli import listings, render, render_json, runner
from app.cli.jobs import job_id_or_exit
from app.cli.render import err, out
from app.services import redrive as redriving
from app.settings.config import Settings

group = typer.Typer(help="The dead-letter queue.", no_args_is_help=True)


async def _dead_letters(
    s: Settings, c: runner.Clients, kind: str | None, limit: int
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every tenant's dead-lettered jobs, and the messages in the DLQ."""
    rows = await redriving.dead_letters(c.database, scope=None, kind=kind, limit=limit)
    return rows, await c.queue.dead_letter_depth()


@group.command("list")
def list_(
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    as_json: render_json.JsonFlag = False,
) -> None:
    """Dead-lettered jobs: kind, attempts, last error, when; and the DLQ's depth. With
    --json: the jobs as GET /v1/dead-letters answers them (an array; no depth)."""
    s = runner.settings_or_exit()
    if as_json:
        from app.api.schemas import JobPublic

        found = runner.on_database(
            s, lambda db: redriving.dead_letters(db, scope=None, kind=kind, limit=limit)
        )
        render_json.emit([JobPublic.of(r) for r in found])
        return
    rows, depth = runner.on_clients(s, lambda c: _dead_letters(s, c, kind, limit))
    listings.print_listing(listings.dead_letters(rows, f"{len(rows)} dead-lettered jobs"))
    out.print(
        f"messages in the DLQ: {depth.get('ApproximateNumberOfMessages', 0)} visible, "
        f"{depth.get('ApproximateNumberOfMessagesNotVisible', 0)} in flight"
    )


def redrive(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show what would be redriven; change nothing")
    ] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many jobs")] = None,
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    job: Annotated[
        list[str] | None, typer.Option("--job", help="only this job (repeatable)")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="redrive past the jobs' redrive budgets (TASKLEASE_REDRIVE_BUDGET); "
            "never through a move task",
        ),
    ] = False,
) -> None:
    """Move dead letters back to the source queue with a fresh attempt budget. A job
    redriven TASKLEASE_REDRIVE_BUDGET times within TASKLEASE_REDRIVE_WINDOW_SECONDS is
    refused (exit 1) unless --force."""
    s = runner.settings_or_exit()
    ids = [job_id_or_exit(j) for j in job or []]
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

        report = runner.on_clients(
            s,
            lambda c: redriving.redrive(
                s,
                c.database,
                c.queue,
                job_ids=ids or None,
                kind=kind,
                limit=limit,
                dry_run=dry_run,
                force=force,
                progress=None if dry_run else tick,
            ),
        )
    title = "would redrive" if dry_run else f"redrive ({report.mode})"
    listings.print_listing(
        listings.dead_letters(
            report.selected, f"{title}: {len(report.selected)} dead-lettered jobs selected"
        )
    )
    if dry_run:
        _refusals(s, report, "would be refused")
        out.print("dry run: nothing changed")
        return
    out.print(render.redrive_summary(report))
    if report.mode == "StartMessageMoveTask":
        out.print(
            "moved with StartMessageMoveTask: each job's attempt budget restarts when its message is claimed"
        )
    if report.refused:
        verdict = (
            "refused (its message is deleted unrun when claimed)"
            if report.mode == "StartMessageMoveTask"
            else "refused (its dead letter stays in the DLQ)"
        )
        _refusals(s, report, verdict)
        raise typer.Exit(1)


def _refusals(s: Settings, report: redriving.RedriveReport, verdict: str) -> None:
    """One line per job past its redrive budget, naming the job and the budget."""
    for job_id in report.refused:
        err.print(
            escape(
                f"{verdict}: job {job_id}: redrive budget used up ({s.redrive_budget} redrives "
                f"within {s.redrive_window_seconds} s, TASKLEASE_REDRIVE_BUDGET); redrive it "
                f"anyway with: tasklease redrive --job {job_id} --force"
            ),
            soft_wrap=True,
        )
