"""What a process last counted of each tenant's admission limits, to bound the next count.

insert_jobs counts a tenant's jobs in the rate window (up to its burst) and its
unfinished jobs (up to its cap) on every submission: under a high limit that is
thousands of index entries a submission (issue 37). Instead, once this process has
counted both at a time T, a submission within ``MAX_AGE`` of it counts only the tenant's
jobs created since a little before T: the window and the unfinished jobs cannot have
grown by more. When that bound already admits the new jobs, the full counts are skipped;
when it does not, the statement counts in full and decides exactly as before. So the
verdict never admits what the full count would refuse, except for the race the full
count already has (submissions in flight at the same moment).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

# How long a count bounds the next ones: its bound grows by every job the tenant makes
# meanwhile, which the next submission reads; past this the statement counts in full.
MAX_AGE_SECONDS = 0.5
# Tenants remembered at once (a process serving more forgets them all and starts over).
MAX_TENANTS = 10_000


# The parameters that make the statement count in full.
UNKNOWN: dict[str, Any] = {"known_at": None, "known_recent": None, "known_flight": None}


@dataclass(frozen=True, slots=True)
class Counted:
    recent: int  # the tenant's jobs in its rate window (up to its burst)
    flight: int  # its unfinished jobs (up to its cap)
    at: dt.datetime  # the counting statement's now()
    seen: float  # time.monotonic() in this process when it answered


class Counts:
    """One process's (one pool's) last full counts, by tenant."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, Counted] = {}

    def params(self, tenant: str) -> dict[str, Any]:
        """insert_jobs' ``known_*`` parameters for ``tenant``: NULL counts in full."""
        known = self._by_tenant.get(tenant)
        if known is None or time.monotonic() - known.seen > MAX_AGE_SECONDS:
            return UNKNOWN
        return {"known_at": known.at, "known_recent": known.recent, "known_flight": known.flight}

    def learn(self, tenant: str, row: Any) -> None:
        """Keep what a statement counted in full (its ``counted_*`` columns; NULL: it did not)."""
        if row["counted_recent"] is None or row["counted_flight"] is None:
            return
        if len(self._by_tenant) >= MAX_TENANTS and tenant not in self._by_tenant:
            self._by_tenant.clear()
        self._by_tenant[tenant] = Counted(
            recent=int(row["counted_recent"]),
            flight=int(row["counted_flight"]),
            at=row["counted_at"],
            seen=time.monotonic(),
        )
