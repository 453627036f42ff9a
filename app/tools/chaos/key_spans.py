"""A keyed job's life on its key, from its events (issue 35: flow control by key). Pure:
the chaos checker (per_key.py) and the bench's keyed phase (bench/keyed.py) read the
same spans.

A job HOLDS its key from a claim (a transition to 'leased' while not holding it) until
it ends: succeeded, cancelled, or dead_lettered (a dead letter frees its key; a redrive's
claim takes it again). Retries, stalls and waits after the claim keep it, as the claim's
key_ahead counts them (app/store/sql/queries/leases.sql). A job WAITS for its key from
its acceptance (or, debounced, from its timer's due time) until its first claim, or its
end if it never ran.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.tools.chaos.repeats import when

ENDS = frozenset({"succeeded", "cancelled", "dead_lettered"})
# The acceptance event of a job written waiting on a timer (a debounce, a run_at):
# 'accepted, debounced: runs at <wake_at> unless ...' (queries/jobs.sql).
RUNS_AT = re.compile(r"runs at (\S+ \S+?)(?: unless|,|$)")

Span = tuple[dt.datetime, dt.datetime | None]  # [start, end); None: still open


@dataclasses.dataclass(frozen=True)
class Life:
    """One job's life on its key: when it was accepted, when it was due (its timer's
    wake-up, else its acceptance), its first claim, its end (if it never ran), and the
    spans it held the key."""

    job_id: str
    accepted: dt.datetime
    due: dt.datetime
    first_claim: dt.datetime | None
    ended_unclaimed: dt.datetime | None
    holds: tuple[Span, ...]
    runs: int  # its claims ('leased' events)

    @property
    def waited_until(self) -> dt.datetime | None:
        """The end of its wait for the key (its first claim, or its end unclaimed)."""
        return self.first_claim or self.ended_unclaimed


def due_time(detail: str | None) -> dt.datetime | None:
    """The wake-up an acceptance event names ('runs at ...'), or None."""
    found = RUNS_AT.search(detail or "")
    if not found:
        return None
    try:
        return dt.datetime.fromisoformat(found.group(1))
    except ValueError:
        return None


def life(job_id: str, events: Sequence[Mapping[str, Any]]) -> Life | None:
    """The job's life from its events in the order written (None: no acceptance event,
    e.g. its history pruned)."""
    if not events:
        return None
    accepted = when(events[0]["at"])
    due = (due_time(events[0].get("detail")) if events[0].get("from_state") is None else None) or (
        accepted
    )
    holds: list[Span] = []
    start: dt.datetime | None = None
    first: dt.datetime | None = None
    ended: dt.datetime | None = None
    runs = 0
    for e in events:
        to, at = e["to_state"], when(e["at"])
        if to == "leased":
            runs += 1
            first = first or at
            start = start or at
        elif to in ENDS and start is not None:
            holds.append((start, at))
            start = None
        elif to in ENDS and first is None and ended is None:
            ended = at
    if start is not None:
        holds.append((start, None))
    return Life(job_id, accepted, due, first, ended, tuple(holds), runs)


def lives(
    jobs: Iterable[Mapping[str, Any]], events_of: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Life]:
    found = {}
    for j in jobs:
        one = life(j["id"], events_of.get(j["id"], ()))
        if one is not None:
            found[j["id"]] = one
    return found


def most_holding(spans: Iterable[Span]) -> tuple[int, dt.datetime | None]:
    """The most spans open at one moment, and the first moment it was reached. At one
    instant an end comes before a start (a claim that sees the end commits after it)."""
    edges: list[tuple[dt.datetime, int]] = []
    for start, end in spans:
        edges.append((start, +1))
        if end is not None:
            edges.append((end, -1))
    live = most = 0
    at: dt.datetime | None = None
    for moment, step in sorted(edges):
        live += step
        if live > most:
            most, at = live, moment
    return most, at


def holding_at(spans: Sequence[Span], moment: dt.datetime) -> int:
    return sum(1 for s, e in spans if s <= moment and (e is None or moment < e))


def hand_off_waits(key_lives: Sequence[Life]) -> list[float]:
    """Seconds from the end of a key's hold to the next claim of the key by a job that
    was waiting for it when the hold ended (the wait for a free slot), one per claim that
    followed an end. A job due after the end waited for nothing on its key."""
    ends = sorted(e for life_ in key_lives for _, e in life_.holds if e is not None)
    waits = []
    for one in key_lives:
        claim = one.first_claim
        if claim is None:
            continue
        i = bisect.bisect_left(ends, claim)
        if i == 0:
            continue
        freed = ends[i - 1]
        if one.due <= freed:
            waits.append((claim - freed).total_seconds())
    return waits


class StepCount:
    """A count over time from (moment, +1/-1) edges: its value at any moment."""

    def __init__(self, edges: Iterable[tuple[dt.datetime, int]]) -> None:
        self.times: list[dt.datetime] = []
        self.values: list[int] = []
        live = 0
        for moment, step in sorted(edges):
            live += step
            if self.times and self.times[-1] == moment:
                self.values[-1] = live
            else:
                self.times.append(moment)
                self.values.append(live)

    def at(self, moment: dt.datetime) -> int:
        i = bisect.bisect_right(self.times, moment)
        return self.values[i - 1] if i else 0

    def changes_within(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        lo, hi = bisect.bisect_right(self.times, start), bisect.bisect_left(self.times, end)
        return self.times[lo:hi]


def lease_count(events: Iterable[Mapping[str, Any]]) -> StepCount:
    """The leases open over time (a lease from 'leased' to its job's next event other than
    'running', as leases.py counts them: a killed worker's lease counts until then)."""
    of_job: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        of_job[str(e["job_id"])].append(e)
    edges: list[tuple[dt.datetime, int]] = []
    for evs in of_job.values():
        opened = False
        for e in evs:
            if e["to_state"] == "running":
                continue
            if opened:
                edges.append((when(e["at"]), -1))
                opened = False
            if e["to_state"] == "leased":
                opened = True
                edges.append((when(e["at"]), +1))
    return StepCount(edges)
