"""The per-tenant running cap, seen from the timeline: the most jobs that held a lease at
once. A lease starts at a 'leased' event and ends at its job's next event other than
'running'; a killed worker's lease therefore counts until its job's next event (past its
expiry, when the cap stopped counting it), so the figure can only over-state."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any


def most_live_leases(events: Iterable[Mapping[str, Any]]) -> int:
    """The largest number of leases open at one moment, over the events given."""
    of_job: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        of_job[str(e["job_id"])].append(e)
    edges: list[tuple[dt.datetime, int]] = []
    for evs in of_job.values():
        opened: dt.datetime | None = None
        for e in sorted(evs, key=lambda e: e["at"]):
            if e["to_state"] == "running":
                continue
            if opened is not None:
                edges.append((e["at"], -1))
                opened = None
            if e["to_state"] == "leased":
                opened = e["at"]
                edges.append((opened, +1))
    live = most = 0
    for _, step in sorted(edges):  # at one instant, closes (-1) sort before opens
        live += step
        most = max(most, live)
    return most
