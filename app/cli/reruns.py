"""`tasklease jobs rerun|fork`: a finished job again as a new job, whole or from a step
(app/services/reruns.py), as the operator (any tenant's job; the new job is the
original's tenant's). What `jobs show` prints of the links: app/cli/render_reruns.py."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from app.api.schemas import JobPublic
from app.cli import render, runner
from app.cli.jobs import job_id_or_exit, json_or_exit
from app.cli.render import out
from app.services import reruns

BY = "the operator (CLI)"

JsonOption = Annotated[bool, typer.Option("--json", help="the new job as JSON")]
PayloadOption = Annotated[
    str | None,
    typer.Option(help="the new job's payload as JSON (default: the original's), validated"),
]


def _payload(text: str | None) -> Any:
    return reruns.UNSET if text is None else json_or_exit(text, "--payload")


def _show(job: dict[str, Any], as_json: bool, what: str, extra: dict[str, Any]) -> None:
    if as_json:  # the API's answer, field for field (POST /v1/jobs/{id}/rerun, /fork)
        out.print_json(json.dumps({**JobPublic.of(job).model_dump(mode="json"), **extra}))
        return
    line = Text(f"job {job['id']}: {what}, ")
    line.append_text(render.state(str(job["state"])))
    out.print(line)


def rerun(
    job_id: Annotated[str, typer.Argument(help="a finished job's id")],
    payload: PayloadOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-run a finished job (succeeded, dead_lettered, cancelled) as a new job of its kind,
    with its payload or --payload; admitted against its tenant's limits like a submission."""
    jid = job_id_or_exit(job_id)
    doc = _payload(payload)
    s = runner.settings_or_exit()

    async def work(c: runner.Clients) -> dict[str, Any]:
        made = await reruns.rerun(s, c.database, c.queue, jid, scope=None, payload=doc, by=BY)
        return made.job

    job = runner.on_clients(s, work)
    _show(job, as_json, f"re-run of {jid}", {})


def fork(
    job_id: Annotated[str, typer.Argument(help="a finished job's id")],
    step: Annotated[
        str | None,
        typer.Option(
            help="the effect key to run from (see `jobs show`); left out: after the last "
            "recorded step (the one a dead letter failed in runs again)"
        ),
    ] = None,
    payload: PayloadOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fork a finished job from --step: a new job that inherits (copies) the steps the job
    recorded before it and runs from there, without running their code again. Without
    --step: every step it recorded, so it runs from the step it failed in."""
    jid = job_id_or_exit(job_id)
    doc = _payload(payload)
    s = runner.settings_or_exit()

    async def work(c: runner.Clients) -> reruns.Forked:
        return await reruns.fork(
            s, c.database, c.queue, jid, step=step, scope=None, payload=doc, by=BY
        )

    forked = runner.on_clients(s, work)
    inherited = forked.inherited
    _show(
        forked.submitted.job,
        as_json,
        f"forked from {jid} "
        + ("after its last recorded step" if step is None else f"at step {step!r}")
        + f", {len(inherited)} steps inherited",
        {"inherited": inherited},
    )
