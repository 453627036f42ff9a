"""The metrics on Lambda: CloudWatch Embedded Metric Format log lines.

A Lambda function has no port to scrape, so at the end of each invocation the
increments of tasklease's counters and histograms since the last flush go to stdout
as EMF JSON lines, which CloudWatch Logs turns into metrics (namespace ``tasklease``).

A small writer over the Prometheus registry's samples, rather than aws-embedded-metrics:
the figures are already counted once (app/metrics.py), and that library would need each
one counted again through its own logger, and it runs its flush on its own event loop.

One line per set of label values (an EMF object's dimension values are its root keys,
one value each): the labels (kind, outcome, action, ...) are the dimensions, each
counter's increment a Count, a histogram's increments its ``_count`` (Count) and
``_sum`` (Seconds). At most 100 metrics per object (the spec's limit); a tenant is never
a dimension (no metric carries one). The scrape-time figures (jobs by state, DLQ depth)
are the API's GET /metrics, not these lines.

Each metric name + dimension values is a CloudWatch custom metric, billed a month each,
so two settings bound how many there are (Terraform sets them per deployment_profile):
TASKLEASE_EMF_METRICS, the sample names written (comma-separated; "all" or unset: every
one), and TASKLEASE_EMF_DIMENSIONS, the labels kept as dimensions ("all" or unset: every
label; "none" or empty: none). Increments of label values that differ only in labels
not kept are summed into one figure, so the count is at most the metrics kept times the
kept labels' values, whatever the number of kinds.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TextIO

from prometheus_client import REGISTRY
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

NAMESPACE = "tasklease"
MAX_METRICS = 100  # per EMF object (the specification's limit)
MAX_DIMENSIONS = 30  # per dimension set

Labels = tuple[tuple[str, str], ...]

_last: dict[tuple[str, Labels], float] = {}


def _unit(sample_name: str, family_type: str) -> str:
    if family_type == "histogram" and sample_name.endswith("_sum"):
        return "Seconds"
    return "Count" if not sample_name.endswith("_dollars_total") else "None"


def _samples(registry: CollectorRegistry) -> Iterable[tuple[str, Labels, float, str]]:
    """(name, labels, running total, unit) of each counter's and histogram's sample."""
    for family in registry.collect():
        if not family.name.startswith("tasklease_") or family.type not in ("counter", "histogram"):
            continue
        for s in family.samples:
            if family.type == "counter" and not s.name.endswith("_total"):
                continue  # _created: when the series began, not a figure
            if family.type == "histogram" and not s.name.endswith(("_count", "_sum")):
                continue
            yield (
                s.name,
                tuple(sorted(s.labels.items())),
                float(s.value),
                _unit(s.name, family.type),
            )


def increments(
    registry: CollectorRegistry = REGISTRY,
) -> dict[Labels, dict[str, tuple[float, str]]]:
    """What moved since the last call, by label values: {labels: {name: (increment, unit)}}."""
    out: dict[Labels, dict[str, tuple[float, str]]] = defaultdict(dict)
    for name, labels, value, unit in _samples(registry):
        delta = value - _last.get((name, labels), 0.0)
        _last[(name, labels)] = value
        if delta > 0:
            out[labels][name] = (delta, unit)
    return dict(out)


ALL = "all"


def _setting(name: str) -> frozenset[str] | None:
    """A comma-separated setting: None for every one ("all" or unset), else the set."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == ALL:
        return None
    if raw.strip() == "none":
        return frozenset()
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def bounded(
    moved: dict[Labels, dict[str, tuple[float, str]]],
    metrics: frozenset[str] | None,
    dimensions: frozenset[str] | None,
) -> dict[Labels, dict[str, tuple[float, str]]]:
    """Only the metrics kept, under only the labels kept: increments whose label values
    differ only in dropped labels summed into one."""
    if metrics is None and dimensions is None:
        return moved
    out: dict[Labels, dict[str, tuple[float, str]]] = defaultdict(dict)
    for labels, figures in moved.items():
        kept = labels if dimensions is None else tuple((k, v) for k, v in labels if k in dimensions)
        for name, (delta, unit) in figures.items():
            if metrics is not None and name not in metrics:
                continue
            before = out[kept].get(name, (0.0, unit))[0]
            out[kept][name] = (before + delta, unit)
    return {k: v for k, v in out.items() if v}


def documents(
    moved: dict[Labels, dict[str, tuple[float, str]]], *, now_ms: int | None = None
) -> list[dict[str, Any]]:
    """The EMF objects for these increments: one per label values, split at 100 metrics."""
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    docs: list[dict[str, Any]] = []
    for labels, figures in sorted(moved.items()):
        dims = [k for k, _ in labels][:MAX_DIMENSIONS]
        names = sorted(figures)
        for i in range(0, len(names), MAX_METRICS):
            chunk = names[i : i + MAX_METRICS]
            doc: dict[str, Any] = {
                "_aws": {
                    "Timestamp": stamp,
                    "CloudWatchMetrics": [
                        {
                            "Namespace": NAMESPACE,
                            "Dimensions": [dims],
                            "Metrics": [{"Name": n, "Unit": figures[n][1]} for n in chunk],
                        }
                    ],
                },
                **dict(labels),
            }
            doc.update({n: figures[n][0] for n in chunk})
            docs.append(doc)
    return docs


def flush(stream: TextIO | None = None) -> int:
    """Write what moved since the last flush as EMF lines (stdout: Lambda's log); how
    many lines. Never raises: a metric must not fail an invocation."""
    try:
        moved = bounded(
            increments(), _setting("TASKLEASE_EMF_METRICS"), _setting("TASKLEASE_EMF_DIMENSIONS")
        )
        docs = documents(moved)
        out = stream or sys.stdout
        for doc in docs:
            out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        out.flush()
        return len(docs)
    except Exception:
        log.warning("EMF metrics not written", exc_info=True)
        return 0
