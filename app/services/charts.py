"""Charts over time (docs/explain/design.md#charts): jobs submitted, succeeded, failed and
dead-lettered per bucket, and p50/p95 latency per kind, for the last hour, day or week,
from the buckets migration 0027 maintains (never a scan of jobs). Percentiles come from
summed fixed log-scale histograms, so they are exact to within a bucket (a factor of
1.78, interpolated inside it)."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from app import store

COUNTS = ("submitted", "succeeded", "failed", "dead_lettered")
HISTOGRAMS = ("latency", "run")


@dataclass(frozen=True, slots=True)
class Window:
    width: int  # seconds a bucket
    points: int  # buckets in the window
    keep: int  # seconds retention keeps this width's buckets


WINDOWS = {
    "hour": Window(60, 60, 3 * 3600),
    "day": Window(900, 96, 2 * 86400),
    "week": Window(3600, 168, 8 * 86400),
}

# The histogram's edges in seconds (as the SQL function chart_bucket): bucket k >= 1 holds
# [EDGES[k], EDGES[k+1]), bucket 0 [0, EDGES[1]), the last bucket EDGES[28] and up.
BUCKETS = 29
EDGES = [0.0] + [0.01 * 10 ** (k / 4) for k in range(1, BUCKETS)]


def bucket_of(seconds: float) -> int:
    """The histogram bucket a duration falls in (chart_bucket's rule, for tests and docs)."""
    return min(BUCKETS - 1, max(0, math.floor(4 * math.log10(max(seconds, 0.01) / 0.01))))


def percentile(hist: dict[int, int], q: float) -> float | None:
    """The q-quantile (0..1) in seconds of a histogram {bucket: n}: the bucket where the
    cumulative count reaches q of the total, interpolated inside it (on the log scale;
    linearly in bucket 0; the last bucket answers its lower edge). None when empty."""
    total = sum(hist.values())
    if total <= 0:
        return None
    want = q * total
    seen = 0
    for b in sorted(hist):
        n = hist[b]
        if n <= 0:
            continue
        if seen + n >= want:
            frac = (want - seen) / n
            if b == 0:
                return EDGES[1] * frac
            if b == BUCKETS - 1:
                return EDGES[b]
            lo, hi = EDGES[b], EDGES[b + 1]
            return float(lo * (hi / lo) ** frac)
        seen += n
    return EDGES[max(hist)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def series(
    db: store.Database,
    *,
    window: str,
    tenant: str | None,
    kind: str | None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The window's series: bucket starts (epoch seconds), counts per bucket and in all,
    and latency percentiles per bucket and in all, for every kind together (kind None)
    and each kind. ``window`` is checked by the caller (one of WINDOWS)."""
    w = WINDOWS[window]
    now = now or dt.datetime.now(dt.UTC)
    last = math.floor(now.timestamp() / w.width) * w.width
    first = last - (w.points - 1) * w.width
    since = dt.datetime.fromtimestamp(first, dt.UTC)
    await store.charts.fold(db)  # cheap (one folder at a time); the read adds the rest anyway
    rows = await store.charts.rows(db, width=w.width, since=since, tenant=tenant, kind=kind)

    counts = {s: [0] * w.points for s in COUNTS}
    # (histogram, kind or None for all) -> point -> bucket -> n
    hists: dict[tuple[str, str | None], list[dict[int, int]]] = defaultdict(
        lambda: [defaultdict(int) for _ in range(w.points)]
    )
    for r in rows:
        i = (int(r["at"].timestamp()) - first) // w.width
        if not 0 <= i < w.points:
            continue  # a row written with a clock ahead of this one's
        if r["series"] in counts:
            counts[r["series"]][i] += int(r["n"])
        elif r["series"] in HISTOGRAMS:
            for k in (None, str(r["kind"])):
                hists[(r["series"], k)][i][int(r["bucket"])] += int(r["n"])

    kinds = sorted({k for (_, k) in hists if k is not None})
    return {
        "window": window,
        "width_seconds": w.width,
        "since": since,
        "until": dt.datetime.fromtimestamp(last + w.width, dt.UTC),
        "tenant": tenant,
        "kind": kind,
        "times": [first + i * w.width for i in range(w.points)],
        "counts": counts,
        "totals": {s: sum(v) for s, v in counts.items()},
        "latency": [_latency(hists, k, w.points) for k in [None, *kinds]],
    }


def _latency(
    hists: dict[tuple[str, str | None], list[dict[int, int]]], kind: str | None, points: int
) -> dict[str, Any]:
    """One kind's (None: every kind's) percentiles, per bucket and over the window."""
    out: dict[str, Any] = {"kind": kind, "series": {}}
    for h, prefix in (("latency", ""), ("run", "run_")):
        per_point = hists.get((h, kind)) or [{} for _ in range(points)]
        whole: dict[int, int] = defaultdict(int)
        for point in per_point:
            for b, n in point.items():
                whole[b] += n
        if h == "latency":
            out["finished"] = sum(whole.values())
            out["histogram"] = [whole.get(b, 0) for b in range(BUCKETS)]
        for q, name in ((0.5, "p50_ms"), (0.95, "p95_ms")):
            out[prefix + name] = _ms(percentile(whole, q))
            out["series"][prefix + name] = [_ms(percentile(p, q)) for p in per_point]
    return out


async def prune(db: store.Database, *, limit: int, max_batches: int | None = None) -> int:
    """Delete every width's buckets past its keep, ``limit`` rows a batch; answers the rows."""
    deleted = 0
    for w in WINDOWS.values():
        ran = 0
        while max_batches is None or ran < max_batches:
            n = await store.charts.prune(db, width=w.width, keep_seconds=w.keep, limit=limit)
            deleted += n
            ran += 1
            if n < limit:
                break
    return deleted
