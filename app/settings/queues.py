"""What the queue settings must be, whichever carrier: the priority queues set together,
six different queues, a Redis URL that is one, and on Redis the streams named after the
queue name when no setting names them. Settings (app/settings/config.py) calls these."""

from __future__ import annotations

import urllib.parse
from typing import Any

# The priority queues' settings: all four set, or none.
PRIORITY_QUEUE_FIELDS = ("queue_url_high", "dlq_url_high", "queue_url_low", "dlq_url_low")
REDIS_SCHEMES = ("redis", "rediss", "unix")


def redis_stream_names(data: Any) -> Any:
    """On the Redis carrier, the streams are named after the queue name when no "URL"
    names them: one setting (TASKLEASE_TRANSPORT) switches carriers."""
    if not isinstance(data, dict) or data.get("transport") != "redis":
        return data
    if data.get("queue_url") or data.get("dlq_url"):
        return data
    name = str(data.get("queue_name") or "tasklease-jobs")
    data = {**data, "queue_url": name, "dlq_url": f"{name}-dlq"}
    for p in ("high", "low"):
        data.update({f"queue_url_{p}": f"{name}-{p}", f"dlq_url_{p}": f"{name}-{p}-dlq"})
    return data


def check_redis_url(value: str | None) -> str | None:
    if value is not None and urllib.parse.urlsplit(value).scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"must be a Redis URL ({', '.join(s + '://' for s in REDIS_SCHEMES)}...), "
            f"not {value[:40]!r}"
        )
    return value


def check_priority_queues(prefix: str, queues: dict[str, str | None]) -> None:
    """``queues``: queue_url, dlq_url and the four PRIORITY_QUEUE_FIELDS, by field name."""
    extra = {n: queues.get(n) for n in PRIORITY_QUEUE_FIELDS}
    unset = [prefix + n.upper() for n, v in extra.items() if not v]
    if unset and len(unset) < len(extra):
        raise ValueError(
            f"{', '.join(unset)} must be set too: the high and low queues and their DLQs "
            "are set together or not at all (unset, every priority shares "
            "TASKLEASE_QUEUE_URL)"
        )
    urls = [u for u in queues.values() if u]
    if not unset and len(set(urls)) < len(urls):
        raise ValueError(
            "TASKLEASE_QUEUE_URL, TASKLEASE_DLQ_URL and the _HIGH and _LOW queues and "
            "DLQs must be six different queues"
        )
