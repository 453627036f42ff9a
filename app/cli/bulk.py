"""`tasklease jobs search` (the operator's view: every tenant unless one is named) and
`tasklease jobs bulk cancel|redrive|rerun` (through the HTTP API, as the key allows: the dry
run's count first, then a progress bar polling GET /v1/bulk/{id}). Both take the same
filter options, parsed into the one filter model (app/services/filters.py)."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app import errors
from app.cli import listings, remote, render, render_json, runner
from app.cli.render import err, out
from app.services import filters, jobs
from app.settings import bounds
from app.states import JobState

group = typer.Typer(
    help="Cancel, redrive or re-run every job a filter matches, in batches a crash resumes.",
    no_args_is_help=True,
)

POLL_SECONDS = 0.5

IdOpt = Annotated[str | None, typer.Option("--id", help="a job id, or its first hex digits")]
KeyOpt = Annotated[str | None, typer.Option(help="the job submitted with this Idempotency-Key")]
KindOpt = Annotated[str | None, typer.Option(help="only jobs of this kind")]
FlowKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key", help="only the jobs of this flow-control key (of any kind unless --kind)"
    ),
]
StateOpt = Annotated[list[JobState] | None, typer.Option(help="only jobs in this state (repeat)")]
TenantOpt = Annotated[str | None, typer.Option(help="only this tenant's jobs")]
TimeOpt = Annotated[str | None, typer.Option(help="ISO 8601 with a time zone")]
ErrorOpt = Annotated[str | None, typer.Option(help="the last error contains this (any case)")]
PayloadOpt = Annotated[
    list[str] | None,
    typer.Option(help="FIELD=TEXT: a payload field equal to this text, e.g. user_id=u-42 (repeat)"),
]
PayloadJsonOpt = Annotated[
    list[str] | None,
    typer.Option(help="FIELD=JSON: a payload field equal to this JSON value, e.g. n=3 (repeat)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON for scripts, no table")]


def filter_or_exit(**given: Any) -> filters.JobFilter:
    """The filter the options name; exit 2 naming what is wrong."""
    try:
        query = []
        for option, prefix in (
            ("payload", filters.PAYLOAD_TEXT),
            ("payload_json", filters.PAYLOAD_JSON),
        ):
            for pair in given.pop(option) or []:
                field, sep, value = pair.partition("=")
                if not sep:
                    raise errors.BadRequest(
                        f"--{option.replace('_', '-')} {pair!r} is not FIELD=VALUE"
                    )
                query.append((prefix + field, value))
        body = {k: v for k, v in given.items() if v not in (None, [])}
        body["payload"] = filters.payload_fields(query)
        return filters.parse(body)
    except errors.BadRequest as exc:
        err.print(f"[red]bad filter:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


# Each filter option (a parameter of every command below) and the JobFilter field it fills.
FILTER_OPTIONS: dict[str, tuple[str, Any]] = {
    "id_": ("id_prefix", IdOpt),
    "idempotency_key": ("idempotency_key", KeyOpt),
    "kind": ("kind", KindOpt),
    "key": ("key", FlowKeyOpt),
    "state": ("states", StateOpt),
    "tenant": ("tenant", TenantOpt),
    "created_after": ("created_after", TimeOpt),
    "created_before": ("created_before", TimeOpt),
    "finished_after": ("finished_after", TimeOpt),
    "finished_before": ("finished_before", TimeOpt),
    "error": ("error", ErrorOpt),
    "payload": ("payload", PayloadOpt),
    "payload_json": ("payload_json", PayloadJsonOpt),
}


def with_filter(fn: Callable[..., None]) -> Callable[..., None]:
    """``fn(flt, **its own options)`` as a command taking the filter options too: typer
    reads the command's signature, the filter options' then ``fn``'s own."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(name, keyword, default=None, annotation=annotation)
        for name, (_, annotation) in FILTER_OPTIONS.items()
    ]
    own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
    params += [p.replace(kind=keyword) for p in own]

    def command(**given: Any) -> None:
        flt = filter_or_exit(
            **{field: given.pop(name) for name, (field, _) in FILTER_OPTIONS.items()}
        )
        fn(flt, **given)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = fn.__doc__
    command.__name__ = fn.__name__
    return command


@with_filter
def search(
    flt: filters.JobFilter,
    limit: Annotated[int, typer.Option(min=1, max=bounds.MAX_PAGE)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Find jobs by id or prefix, idempotency key, flow-control key, kind, states, times,
    error text and payload fields (newest first), as a table or --json."""
    s = runner.settings_or_exit()
    rows, cursor = runner.on_database(
        s, lambda database: jobs.search(database, flt, limit=limit, scope=None)
    )
    if as_json:  # as GET /v1/jobs answers the same search
        from app.api.schemas import JobPage, JobPublic

        render_json.emit(JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=cursor))
        return
    listings.print_listing(listings.jobs([{**r, "waiting_for": jobs.waiting_for(r)} for r in rows]))


def _bulk(
    action: str,
    flt: filters.JobFilter,
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    api_url: str | None,
    api_key: str | None,
) -> None:
    import httpx  # only a bulk action pays for its import

    url, key = remote.connection_or_exit(
        api_url, api_key, why=f"jobs bulk {action} acts through the API"
    )
    body = {"action": action, "filter": flt.canonical()}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        count = _post(http, {**body, "dry_run": True})["total"]
        if dry_run:
            render.plain(
                json.dumps({"action": action, "total": count})
                if as_json
                else f"{action}: {count} jobs match"
            )
            return
        if not as_json:
            err.print(f"{action}: {count} jobs match")
        if count == 0:
            if as_json:
                render.plain(json.dumps({"action": action, "total": 0, "operation": None}))
            return
        if not yes and not typer.confirm(f"{action} these {count} jobs?", err=True):
            raise typer.Exit(1)
        op = _post(http, body)["operation"]
        op = _follow(http, op, quiet=as_json)
    if as_json:
        render.plain(json.dumps(op))
    else:
        out.print(
            f"bulk {escape(op['action'])} {op['id']}: {escape(op['state'])}, {op['done']} done, "
            f"{op['skipped']} skipped, {op['failed']} failed of {op['total']}"
        )
    if op["state"] != "done" or op["failed"]:
        raise typer.Exit(1)


def _post(http: Any, body: dict[str, Any]) -> dict[str, Any]:
    return _answer(http.post("/v1/bulk", json=body))


def _answer(resp: Any) -> dict[str, Any]:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        err.print(f"[red]{resp.status_code}:[/] {escape(str(detail))}")
        raise typer.Exit(1)
    doc: dict[str, Any] = resp.json()
    return doc


def _follow(http: Any, op: dict[str, Any], *, quiet: bool) -> dict[str, Any]:
    """Poll GET /v1/bulk/{id} until it is no longer running, with a progress bar on stderr."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, disable=quiet, transient=False) as bar:
        task = bar.add_task(f"bulk {op['action']}", total=op["total"] or None)
        while True:
            seen = op["done"] + op["skipped"] + op["failed"]
            bar.update(task, completed=seen, total=max(op["total"], seen) or None)
            if op["state"] != "running":
                return op
            time.sleep(POLL_SECONDS)
            op = _answer(http.get(f"/v1/bulk/{op['id']}"))


DryOpt = Annotated[bool, typer.Option("--dry-run", help="only count the jobs it would act on")]
YesOpt = Annotated[bool, typer.Option("--yes", help="act without asking")]
UrlOpt = Annotated[str | None, typer.Option(help=f"the API's URL (default ${remote.API_URL})")]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        help=f"an API key (default ${remote.API_KEY}); a tenant key acts on its tenant only"
    ),
]


def _command(action: str, doc: str) -> Callable[..., None]:
    def command(
        flt: filters.JobFilter,
        dry_run: DryOpt = False,
        yes: YesOpt = False,
        as_json: JsonOpt = False,
        api_url: UrlOpt = None,
        api_key: ApiKeyOpt = None,
    ) -> None:
        _bulk(
            action, flt, dry_run=dry_run, yes=yes, as_json=as_json, api_url=api_url, api_key=api_key
        )

    command.__doc__ = doc
    command.__name__ = action
    return with_filter(command)


group.command("cancel")(
    _command(
        "cancel",
        "Cancel every unfinished job the filter matches: the count first, then a progress bar.",
    )
)
group.command("redrive")(
    _command(
        "redrive",
        "Redrive every dead letter the filter matches (within each job's redrive budget).",
    )
)
group.command("rerun")(
    _command(
        "rerun",
        "Re-run every finished job the filter matches as a new job (rerun_of it), once "
        "each, at the pace the tenant's limits allow.",
    )
)
