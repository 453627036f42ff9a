"""Both deployment profiles priced side by side (``tasklease cost``, ``--json``'s
``profiles``): each one's fixed monthly total, USD per million jobs by kind and traffic
shape, break-even against durable functions, and the small profile's targets."""

from __future__ import annotations

from typing import Any

from app.cost.base import Options
from app.cost.model import LOW_TRAFFIC, MODES, price
from app.cost.prices import PriceTable
from app.cost.profiles import PROFILES, SMALL_TARGETS

HEADLINE_KIND = "support.triage"


def profile_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """One profile's figures for scripts: the fixed monthly total, USD per million jobs by
    kind and traffic shape (the figures' run keys), the break-even by kind, the worker's
    memory against each kind's measured peak."""
    keys = {label: key for key, label in MODES}
    per_million: dict[str, dict[str, float]] = {}
    for s in doc["per_million_jobs"]:
        per_million.setdefault(s["kind"], {})[keys[s["mode"]]] = s["total_usd"]
    return {
        "fixed_monthly_usd": doc["fixed_per_month"]["total_usd"],
        "per_million_usd": per_million,
        "break_even_jobs_per_month": {
            c["kind"]: c["break_even_jobs_per_month"] for c in doc["durable_functions"]
        },
        "durable_per_million_usd": {
            c["kind"]: c["durable"]["total_usd"] for c in doc["durable_functions"]
        },
        "worker_memory": doc["worker_memory"],
    }


def targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The small profile's targets (issue 36), each with its figure and whether it is met;
    a figure the run did not measure (no support.triage) is not met."""
    triage = summary["per_million_usd"].get(HEADLINE_KIND, {}).get(LOW_TRAFFIC)
    at = summary["break_even_jobs_per_month"].get(HEADLINE_KIND)
    rows = [
        (
            "fixed per month",
            SMALL_TARGETS["fixed_monthly_usd_at_most"],
            summary["fixed_monthly_usd"],
        ),
        (
            f"{HEADLINE_KIND}, low traffic, per million jobs",
            SMALL_TARGETS["support.triage_low_traffic_per_million_usd_at_most"],
            triage,
        ),
        (
            f"{HEADLINE_KIND}: cheaper than durable functions above (jobs a month)",
            SMALL_TARGETS["break_even_jobs_per_month_at_most"],
            at,
        ),
    ]
    return [
        {"what": what, "at_most": limit, "value": v, "met": v is not None and v <= limit}
        for what, limit, v in rows
    ]


def price_profiles(
    figures: dict[str, Any], prices: PriceTable, selected: str, **options: Any
) -> dict[str, Any]:
    """Every profile priced with the same options (``tasklease cost --json``): the
    selected profile's whole report at the top (as before profiles), and under
    ``profiles`` each one's summary and report; the small one's targets checked."""
    profiles: dict[str, Any] = {}
    for name in PROFILES:
        doc = price(figures, prices, Options(profile=name, **options))
        entry = {**profile_summary(doc), "report": doc}
        if name == "small":
            entry["targets"] = targets(entry)
        profiles[name] = entry
    return {**profiles[selected]["report"], "profile": selected, "profiles": profiles}
