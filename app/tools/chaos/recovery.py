"""After a carrier restart: what it lost and how long until it was made good.

A job waiting for a worker (queued, retrying or stalled) or held by one (leased,
running), not parked and with no cancel asked, has a message on the carrier. Right after
the restart, the ones the carrier holds none for are what the restart lost (without
Redis's AOF: every one). The run then watches until each of them has a message again
(the sweeper re-sends one for a job unchanged for TASKLEASE_LOST_MESSAGE_SECONDS) or
needs none any more (it finished, or a worker took it): that is the recovery time.

Only on Redis, whose streams can be read without taking their messages: the harness
reads them with raw RESP (it is no client of the carrier's; only the transport imports
redis). On SQS, where a look would hide the messages, the restart's figures are its
duration only.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from collections.abc import Iterable
from typing import Any

from app import errors
from app.store import audit
from app.store.pool import Database

JOB_ID = re.compile(rb'job_id\\?":\\?"([0-9a-f-]{36})')
POLL_SECONDS = 0.5


def _read(f: Any) -> Any:
    """One RESP reply from the file ``f``: an error reply raises."""
    line = f.readline()
    if not line:
        raise ConnectionError("Redis closed the connection")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n")
    if kind == b"-":
        raise ConnectionError(rest.decode(errors="replace"))
    if kind in (b"+", b":"):
        return rest
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:n]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ConnectionError(f"not a RESP reply: {line[:40]!r}")


def _command(*args: str) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def _flatten(reply: Any) -> Iterable[bytes]:
    if isinstance(reply, bytes):
        yield reply
    elif isinstance(reply, list):
        for r in reply:
            yield from _flatten(r)


def jobs_on_redis(port: int, streams: Iterable[str]) -> set[str]:
    """The job ids of every entry of these streams (pending ones included) and of their
    delayed sets: the jobs the carrier holds a message for."""
    found: set[str] = set()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        f = sock.makefile("rb")
        for s in streams:
            sock.sendall(
                _command("XRANGE", s, "-", "+") + _command("ZRANGE", f"{s}:delayed", "0", "-1")
            )
            for reply in (_read(f), _read(f)):
                for value in _flatten(reply):
                    found.update(m.decode() for m in JOB_ID.findall(value))
    return found


async def waiting_on_carrier(database: Database) -> set[str] | None:
    """The jobs that need a message on the carrier; None while the database is away."""
    with contextlib.suppress(errors.StoreError, TimeoutError, OSError):
        return set(await asyncio.wait_for(audit.waiting_on_carrier(database), 5))
    return None


async def lost_by_restart(
    database: Database, port: int, streams: list[str], record: dict[str, Any]
) -> set[str]:
    """Right after the restart: the jobs that need a message on the carrier and have none
    there (``record`` gets how many needed one, and how many the carrier kept)."""
    for _ in range(20):
        waiting = await waiting_on_carrier(database)
        if waiting is not None:
            on_redis = await asyncio.to_thread(jobs_on_redis, port, streams)
            record.update(needed=len(waiting), kept=len(waiting & on_redis))
            record["lost"] = len(waiting - on_redis)
            return waiting - on_redis
        await asyncio.sleep(POLL_SECONDS)
    raise errors.TaskleaseError("the database did not answer after the carrier restart")


async def watch(
    database: Database,
    port: int,
    streams: list[str],
    lost: set[str],
    since: float,
    record: dict[str, Any],
    within: float = 120.0,
) -> None:
    """Until every job in ``lost`` has a message again or needs none any more:
    ``record["recovered_in"]`` (seconds from ``since``), or ``record["unrecovered"]``."""
    left = set(lost)
    deadline = time.monotonic() + within
    while left and time.monotonic() < deadline:
        await asyncio.sleep(POLL_SECONDS)
        waiting = await waiting_on_carrier(database)
        if waiting is None:
            continue
        try:
            on_redis = await asyncio.to_thread(jobs_on_redis, port, streams)
        except OSError:
            continue  # the server restarting again
        # A job whose message was taken and deleted between the two reads looks unrecovered
        # for one poll more: harmless, the next one sees it.
        left = {j for j in left if j in waiting and j not in on_redis}
    if left:
        record["unrecovered"] = sorted(left)
    else:
        record["recovered_in"] = round(time.monotonic() - since, 2)
