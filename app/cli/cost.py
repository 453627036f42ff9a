"""`tasklease cost`: dollars per million jobs on AWS from `make cost`'s measured figures
and a price table (app/cost/model.py does the arithmetic)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from app.cli import render_json
from app.cli.render import out
from app.cli.runner import errors_exit
from app.cost import base as cost_base
from app.cost import figures as cost_figures
from app.cost import model as cost_model
from app.cost import prices as cost_prices
from app.cost import profiles as cost_profiles
from app.cost import sides as cost_sides

HOURS = 730
FIGURES = Path(__file__).resolve().parents[2] / "bench" / "results" / "cost.json"
PRICES_ENV = "TASKLEASE_COST_PRICES"


def _usd(v: float) -> str:
    return f"${v:,.2f}" if v >= 1 or v == 0 else f"${v:.3f}"


def _jobs(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n:,}"


SHORT = {
    "submitted singly, 1 job per worker call (low traffic)": "1 job per worker call (low traffic)",
    "submitted singly, backlog (worker batches of 10)": "singly, backlog (worker batches of 10)",
    "submitted in batches of 10, backlog": "batches of 10, backlog",
}


def per_job_tables(doc: dict[str, Any]) -> list[Table]:
    """One table per kind: a column per submission mode, a row per line."""
    tables = []
    kinds = list(dict.fromkeys(r["kind"] for r in doc["per_million_jobs"]))
    for kind in kinds:
        runs = [r for r in doc["per_million_jobs"] if r["kind"] == kind]
        t = Table(title=escape(f"{kind}: USD per million jobs"), title_justify="left")
        t.add_column("line")
        for r in runs:
            t.add_column(escape(SHORT.get(r["mode"], r["mode"])), justify="right")
        names: list[str] = []
        for r in runs:
            names += [x["name"] for x in r["lines"] if x["name"] not in names]
        for name in names:
            cells = []
            for r in runs:
                hit = [x["usd"] for x in r["lines"] if x["name"] == name]
                cells.append(_usd(hit[0]) if hit else "-")
            t.add_row(escape(name), *cells)
        t.add_section()
        t.add_row("[bold]total[/]", *(f"[bold]{_usd(r['total_usd'])}[/]" for r in runs))
        t.add_row("DB round trips per job", *(f"{r['db_round_trips_per_job']:.2f}" for r in runs))
        tables.append(t)
    return tables


def fixed_table(doc: dict[str, Any]) -> Table:
    t = Table(title="Fixed, per month with no jobs (USD)", title_justify="left")
    t.add_column("line")
    t.add_column("USD/month", justify="right")
    t.add_column("what")
    for x in doc["fixed_per_month"]["lines"]:
        t.add_row(escape(x["name"]), _usd(x["usd"]), escape(x["detail"]))
    t.add_section()
    fixed = doc["fixed_per_month"]
    t.add_row("[bold]total[/]", f"[bold]{_usd(fixed['total_usd'])}[/]", "")
    if doc["options"]["nat_gateway"]:
        without = fixed["total_without_nat_gateway_usd"]
        t.add_row("total without the NAT gateway", _usd(without), "fake model, no webhook")
    return t


def durable_table(doc: dict[str, Any]) -> Table:
    t = Table(
        title="The same jobs as Lambda durable functions: USD per million jobs",
        title_justify="left",
    )
    t.add_column("kind")
    t.add_column("line")
    t.add_column("USD/1M jobs", justify="right")
    t.add_column("what")
    for c in doc["durable_functions"]:
        d = c["durable"]
        for i, x in enumerate(d["lines"]):
            kind = escape(c["kind"]) if i == 0 else ""
            t.add_row(kind, escape(x["name"]), _usd(x["usd"]), escape(x["detail"]))
        t.add_row("", "[bold]durable total[/]", f"[bold]{_usd(d['total_usd'])}[/]", "")
        for mode, v in c["tasklease"].items():
            t.add_row("", escape(f"tasklease, {mode}"), _usd(v["usd_per_million"]), _versus(v))
        t.add_section()
    return t


def _xray_header(sampled: float | None, mode: str = "Active") -> str:
    if mode == "PassThrough":
        return f"tracing PassThrough: X-Ray {sampled or 0:.0%} traced"
    if sampled is None:
        return "X-Ray: tables 100% traced, break-evens at the default rule's share at their rate"
    return f"X-Ray {sampled:.0%} traced (--xray-sampled)"


def _versus(v: dict[str, Any]) -> str:
    b = v["break_even_jobs_per_month"]
    if b is None:
        return "+ fixed lines; never cheaper"
    shares = ", ".join(f"{f} {x:.0%}" for f, x in v["xray_sampled_at_break_even"].items())
    rate = f"{_jobs(b)} jobs/month ({b / (HOURS * 3600):.2g} a second; X-Ray there: {shares})"
    if v["headline"]:
        return f"[bold]+ fixed lines; cheaper above {rate}[/]"
    return f"+ fixed lines; only with a standing backlog: above {rate}"


def _plain(v: float) -> str:
    return f"{v:.10f}".rstrip("0").rstrip(".")


def _where(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def prices_table(doc: dict[str, Any]) -> Table:
    p = doc["prices"]
    title = f"Prices: {p['region']}, {p['date']}, {p['currency']} ({_where(p['path'])})"
    t = Table(title=escape(title), title_justify="left")
    t.add_column("price", no_wrap=True)
    t.add_column("USD", justify="right")
    t.add_column("per")
    t.add_column("source", no_wrap=True)
    for name, x in p["items"].items():
        count = "1M " if x["per"] == 1_000_000 else f"{x['per']:,.0f} "
        per = x["unit"] if x["per"] == 1 else count + x["unit"]
        t.add_row(escape(name), _plain(x["usd"]), escape(per), escape(x["source"]))
    return t


def price_notes(doc: dict[str, Any]) -> list[str]:
    p = doc["prices"]
    notes = [f"{name}: {x['note']}" for name, x in p["items"].items() if x["note"]]
    return notes + [f"not found: {name}: {why}" for name, why in p["not_found"].items()]


def profiles_table(doc: dict[str, Any]) -> Table:
    """The profiles side by side: each fixed line, the per-million totals by kind and
    traffic shape, the break-evens."""
    names = list(doc["profiles"])
    t = Table(
        title="Profiles (Terraform deployment_profile) side by side: USD",
        title_justify="left",
    )
    t.add_column("")
    for name in names:
        t.add_column(escape(name), justify="right")
    reports = [doc["profiles"][n]["report"] for n in names]
    lines: list[str] = []
    for r in reports:
        lines += [x["name"] for x in r["fixed_per_month"]["lines"] if x["name"] not in lines]
    for line in lines:
        cells = []
        for r in reports:
            hit = [x["usd"] for x in r["fixed_per_month"]["lines"] if x["name"] == line]
            cells.append(_usd(hit[0]) if hit else "-")
        t.add_row(escape(f"fixed: {line}"), *cells)
    t.add_section()
    t.add_row(
        "[bold]fixed, per month[/]",
        *(f"[bold]{_usd(doc['profiles'][n]['fixed_monthly_usd'])}[/]" for n in names),
    )
    t.add_section()
    first = doc["profiles"][names[0]]
    for kind, shapes in first["per_million_usd"].items():
        for shape in shapes:
            label = SHORT.get(dict(cost_model.MODES)[shape], shape)
            t.add_row(
                escape(f"{kind}, {label}: per 1M jobs"),
                *(_usd(doc["profiles"][n]["per_million_usd"][kind][shape]) for n in names),
            )
        t.add_row(
            escape(f"{kind}: durable functions per 1M jobs (same memory, same tracing)"),
            *(_usd(doc["profiles"][n]["durable_per_million_usd"][kind]) for n in names),
        )
        t.add_row(
            escape(f"{kind}: cheaper than durable functions above"),
            *(_break(doc["profiles"][n]["break_even_jobs_per_month"][kind]) for n in names),
        )
    return t


def _break(b: int | None) -> str:
    return "never" if b is None else f"{_jobs(b)} jobs/month"


def targets_lines(doc: dict[str, Any]) -> list[str]:
    small = doc["profiles"].get("small", {})
    out_lines = []
    for x in small.get("targets", []):
        v = x["value"]
        shown = (
            "not measured" if v is None else (_jobs(round(v)) if x["at_most"] >= 1000 else _usd(v))
        )
        limit = _jobs(x["at_most"]) if x["at_most"] >= 1000 else _usd(x["at_most"])
        verdict = "[green]met[/]" if x["met"] else "[red]NOT met[/]"
        out_lines.append(
            f"- small profile: {escape(x['what'])}: {shown} (target at most {limit}): {verdict}"
        )
    return out_lines


def memory_line(name: str, m: dict[str, Any]) -> str:
    """Whether a profile's worker memory covers what make cost measured."""
    peaks = ", ".join(f"{k} {v:g} MB" for k, v in m["peak_rss_mb_by_kind"].items())
    verdict = "[green]enough[/]" if m["enough"] else "[red]NOT enough[/]"
    return (
        f"- {escape(name)} profile: worker {m['worker_memory_mb']} MB; measured peak "
        f"resident memory {escape(peaks)}; needs {m['needed_mb']} MB "
        f"({escape(m['rule'])}): {verdict}"
    )


def render_profile(doc: dict[str, Any]) -> None:
    o = doc["options"]
    out.print(f"[bold]Profile {escape(o['profile'])}[/]")
    out.print(
        escape(
            f"Lambda {o['arch']}: API {o['api_memory_mb']} MB, worker {o['worker_memory_mb']} MB, "
            f"sweeper {o['sweeper_memory_mb']} MB; model {o['model_seconds']:g} s per call; "
            f"NAT gateway {'counted' if o['nat_gateway'] else 'not counted'}; "
            f"{_xray_header(o['xray_sampled'], o['tracing_mode'])}; "
            f"figures measured {doc['figures']['measured_at']}"
        ),
        highlight=False,
    )
    for table in [*per_job_tables(doc), fixed_table(doc), durable_table(doc)]:
        out.print(table)
    out.print("[bold]Assumptions[/]")
    for a in doc["assumptions"]:
        out.print(f"- {escape(a)}", highlight=False)


def render(doc: dict[str, Any]) -> None:
    out.print(profiles_table(doc))
    for line in targets_lines(doc):
        out.print(line, highlight=False)
    for name, entry in doc["profiles"].items():
        out.print(memory_line(name, entry["worker_memory"]), highlight=False)
    for name in doc["profiles"]:
        render_profile(doc["profiles"][name]["report"])
    out.print(prices_table(doc))
    for note in price_notes(doc):
        out.print(f"- {escape(note)}", highlight=False)
    out.print("[bold]The measured figures' notes[/]")
    for a in doc["figures"]["notes"]:
        out.print(f"- {escape(a)}", highlight=False)


def cost(
    figures: Annotated[Path, typer.Option(help="`make cost`'s measured figures")] = FIGURES,
    prices: Annotated[
        Path | None,
        typer.Option(help=f"a price file like app/cost/aws_prices.json (or {PRICES_ENV})"),
    ] = None,
    profile: Annotated[
        str,
        typer.Option(
            help="the profile whose whole report is the top of --json (both are printed "
            "and under --json's profiles): small or production (Terraform's deployment_profile)"
        ),
    ] = cost_profiles.DEFAULT_PROFILE,
    arch: Annotated[
        str, typer.Option(help="arm64 or x86_64 (Terraform's lambda_architecture)")
    ] = cost_base.TERRAFORM_DEFAULTS["lambda_architecture"],
    api_memory_mb: Annotated[
        int, typer.Option(help="the API function's memory")
    ] = cost_base.TERRAFORM_DEFAULTS["api_memory_mb"],
    worker_memory_mb: Annotated[
        int | None,
        typer.Option(
            help="the worker function's memory, in both profiles (default: each profile's)",
            show_default=False,
        ),
    ] = None,
    sweeper_memory_mb: Annotated[
        int, typer.Option(help="the sweeper function's memory")
    ] = cost_base.TERRAFORM_DEFAULTS["sweeper_memory_mb"],
    model_seconds: Annotated[
        float, typer.Option(help="the model's latency per call, billed while the worker waits")
    ] = 2.0,
    nat_gateway: Annotated[
        bool | None,
        typer.Option(
            "--nat-gateway/--no-nat-gateway",
            help="count a NAT gateway and its Elastic IP (default: when --model-seconds > 0, "
            "as a real model provider needs enable_nat_gateway)",
            show_default=False,
        ),
    ] = None,
    xray_sampled: Annotated[
        float | None,
        typer.Option(
            help="share of invocations X-Ray records, everywhere (default: the default "
            "rule's: every one in the per-million tables, its share at the break-even's rate "
            "there)",
            show_default=False,
        ),
    ] = None,
    db_storage_gb: Annotated[
        int, typer.Option(help="RDS gp3 storage")
    ] = cost_base.TERRAFORM_DEFAULTS["db_allocated_storage_gb"],
    as_json: render_json.JsonFlag = False,
) -> None:
    """What a job costs on AWS: dollars per million jobs (single and batch submission),
    the fixed monthly lines, and the same jobs on Lambda durable functions."""
    with errors_exit():
        env_prices = os.environ.get(PRICES_ENV)
        table = cost_prices.load_prices(prices or (Path(env_prices) if env_prices else None))
        cost_profiles.profile(profile)
        doc = cost_sides.price_profiles(
            cost_figures.load_figures(figures),
            table,
            profile,
            arch=arch,
            api_memory_mb=api_memory_mb,
            worker_memory_mb=worker_memory_mb,
            sweeper_memory_mb=sweeper_memory_mb,
            model_seconds=model_seconds,
            nat_gateway=nat_gateway,
            xray_sampled=xray_sampled,
            db_storage_gb=db_storage_gb,
        )
    if as_json:
        render_json.emit(doc)
        return
    render(doc)
