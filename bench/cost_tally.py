"""``make cost``'s bookkeeping (bench/cost.py measures): the functions' log bytes and the
custom metrics among their EMF lines, and the rounds of one measurement combined."""

from __future__ import annotations

import io
import json
import statistics
from collections import Counter
from typing import Any


class Bytes(io.TextIOBase):
    """A stream that keeps how many bytes were written to it (the functions' logs) and the
    distinct metrics of the EMF lines among them (metric name + dimension values: what
    CloudWatch bills as one custom metric each)."""

    def __init__(self) -> None:
        self.n = 0
        self.metrics: set[str] = set()
        self._line = ""

    def write(self, s: str) -> int:
        self.n += len(s.encode())
        *done, self._line = (self._line + s).split("\n")
        for line in done:
            if line.startswith('{"_aws"'):
                self.metrics |= emf_metrics(json.loads(line))
        return len(s)


def emf_metrics(doc: dict[str, Any]) -> set[str]:
    """The custom metrics one EMF object defines: each metric under each dimension set,
    with the dimension values the object carries."""
    out = set()
    for directive in doc["_aws"]["CloudWatchMetrics"]:
        for dims in directive["Dimensions"]:
            where = ",".join(f"{d}={doc.get(d)}" for d in sorted(dims))
            for metric in directive["Metrics"]:
                out.add(f"{directive['Namespace']}/{metric['Name']}[{where}]")
    return out


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one measurement as one: counts summed, each function's times the median
    of the rounds' (a round that absorbed a first-use cost does not set the figure)."""
    first = rounds[0]
    out: dict[str, Any] = {**first, "jobs": sum(r["jobs"] for r in rounds), "rounds": len(rounds)}
    for fn in ("api", "worker"):
        parts = [r[fn] for r in rounds]
        merged: dict[str, Any] = {"invocations": sum(p["invocations"] for p in parts)}
        for key in ("mean_ms", "p50_ms", "billed_mean_ms"):
            merged[key] = statistics.median(p[key] for p in parts)
        merged["rounds_billed_mean_ms"] = [p["billed_mean_ms"] for p in parts]
        merged["sqs"] = {
            k: dict(sum((Counter(p["sqs"][k]) for p in parts), Counter()))
            for k in ("calls", "entries")
        }
        for key in ("pg_round_trips", "log_bytes"):
            merged[key] = sum(p[key] for p in parts)
        if fn == "worker":
            merged["event_source"] = dict(
                sum((Counter(p["event_source"]) for p in parts), Counter())
            )
        out[fn] = merged
    return out
