"""What the CLI prints of flow control by key (docs/howto/flow-control.md): a keyed job's
key and where it stands on it (`jobs show`), and a kind's limits per key (`kinds`). Every
value goes through ``PlainTable``/``Text``: a key is shown as written, never as markup."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from app.cli.render import PlainTable
from app.client.models import KindFlow


def _seconds(value: float) -> str:
    return f"{value:g} s"


def limits(concurrency: int | None, rate: dict[str, Any] | None) -> str:
    """A key's limits in words: "1 at a time, 2 starts per 1 s", or "none"."""
    parts = []
    if concurrency is not None:
        parts.append(f"{concurrency} at a time")
    if rate is not None:
        parts.append(f"{rate['limit']} starts per {_seconds(rate['per_seconds'])}")
    return ", ".join(parts) or "none"


def key_table(status: dict[str, Any]) -> PlainTable:
    """A keyed job's key (services.jobs.key_status): its limits, the key's other jobs and
    whether it waits for its key."""
    table = PlainTable(show_header=False, title="flow control by key")
    table.add_row("key", status["key"])
    table.add_row("limits per key", limits(status["concurrency"], status["rate"]))
    table.add_row(
        "the key's jobs",
        f"{status['holding']} others holding it, {status['queued_ahead']} queued before "
        f"this one, {status['open']} unfinished",
    )
    if status["waits_for_key"]:
        table.add_row(
            "waits",
            Text(
                "for its key: its key's concurrency of jobs are ahead of it; it starts when "
                "one of them ends",
                style="yellow",
            ),
        )
    elif status["waits_for_rate"]:
        table.add_row(
            "waits",
            Text(
                "for its key's rate: the key's starts in the period are used up",
                style="yellow",
            ),
        )
    return table


def kind_flow(flow: KindFlow | None) -> str:
    """A kind's flow control in one cell: "key from payload; 1 at a time; if active:
    reject", "debounce 2 s", or "none"."""
    if flow is None:
        return "none"
    parts = ["key from payload"] if flow.keyed else []
    rate = None if flow.rate is None else flow.rate.model_dump()
    if flow.concurrency is not None or rate is not None:
        parts.append(limits(flow.concurrency, rate))
    if flow.if_active != "enqueue":
        parts.append(f"if active: {flow.if_active}")
    if flow.debounce_seconds is not None:
        parts.append(f"debounce {_seconds(flow.debounce_seconds)}")
    return "; ".join(parts) or "none"
