"""The Redis carrier's command counts: INFO commandstats read before and after a phase.

The counts are the server's: every command it ran, by name, whoever sent it. A Lua
script counts as one EVALSHA *and* each command it runs (``redis.call``) under that
command's own name, so the totals are server-side work, not round trips. Which command
the carrier sends itself and which only its scripts run is known from
app/transport/redis_streams.py and redis_scripts.py (``SCRIPT_ONLY``): the report keeps
both, and the "client" total leaves the script-only ones out.

On a server shared with others (``--redis-url``) their commands are counted too.
"""

from __future__ import annotations

import redis

# Commands app/transport/redis_scripts.py runs inside its scripts and redis_streams.py
# never sends itself. XADD and XPENDING are both: the carrier sends them (a send's
# pipeline, a dead letter; the depth) and a script runs them (a due delayed message
# moved, an entry dead-lettered; a handle checked).
SCRIPT_ONLY = frozenset(
    {
        "TIME",
        "GET",
        "SET",
        "ZADD",
        "ZREM",
        "ZRANGE",
        "ZRANGEBYSCORE",
        "XAUTOCLAIM",
        "XCLAIM",
        "XACK",
        "XDEL",
        "XRANGE",
    }
)
BOTH = frozenset({"XADD", "XPENDING"})
# The benchmark's own reads of the counts: never counted.
OWN = frozenset({"INFO"})


def where(command: str) -> str:
    """``client``, ``script`` or ``both``: who sends ``command`` in tasklease's runs."""
    if command in SCRIPT_ONLY:
        return "script"
    return "both" if command in BOTH else "client"


def read(client: redis.Redis) -> dict[str, int]:
    """Calls by command name (upper case; a subcommand as ``CLIENT|SETINFO``)."""
    stats = client.info("commandstats")
    return {
        str(k).removeprefix("cmdstat_").upper(): int(v["calls"])
        for k, v in stats.items()
        if isinstance(v, dict) and "calls" in v
    }


class CommandStats:
    """Deltas of INFO commandstats since ``mark``, less the INFO calls that read them."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=5)
        self.base: dict[str, int] = {}

    def mark(self) -> None:
        self.base = read(self.client)

    def delta(self) -> dict[str, int]:
        now = read(self.client)
        out = {k: v - self.base.get(k, 0) for k, v in now.items() if k not in OWN}
        return {k: v for k, v in sorted(out.items()) if v > 0}


def per_job(calls: dict[str, int], n: int, *, scripts: bool = True) -> dict[str, object]:
    """Commands per job by command, with who sends them, the server-side total and the
    total the carrier itself sends (script-only commands left out; ``scripts=False``
    for a client that runs none, such as Celery's kombu: all of its commands are its own)."""
    n = max(1, n)
    client = sum(v for k, v in calls.items() if not scripts or k not in SCRIPT_ONLY)
    return {
        "by_command": {k: round(v / n, 3) for k, v in sorted(calls.items())},
        "where": {k: where(k) for k in sorted(calls)},
        "total": round(sum(calls.values()) / n, 3),
        "client_total": round(client / n, 3),
        "scripts_per_job": round((calls.get("EVALSHA", 0) + calls.get("EVAL", 0)) / n, 3),
    }
