"""Which queue a message goes to and came from: the priorities' source queues, their paired
dead-letter queues, and the queue each receipt handle in hand belongs to.

SQS takes a receipt handle only on the queue that gave it (AWS, LocalStack and moto all
answer ``ReceiptHandleIsInvalid`` on another), so a carrier with three queues remembers
where each message in hand came from: from its own receive, or from the record's
``eventSourceARN`` when Lambda's event source mapping received it. A handle it does not
know (forgotten, or a deployment with one queue) is taken to the normal queue.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from app.priorities import ORDER, Priority
from app.settings.config import Settings

# Receipt handles remembered at most: a handle leaves when its message is deleted or its
# batch is done; this bounds what a process that never says so (Lambda) keeps.
MAX_HANDLES = 10_000


def queue_name(url: str) -> str:
    """The queue's name, the last part of its URL (and of its ARN)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


class QueueSet:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._handles: OrderedDict[str, str] = OrderedDict()  # handle -> queue URL

    def priorities(self) -> tuple[Priority, ...]:
        """The priorities with a queue of their own; just normal when they share one."""
        return ORDER if self.settings.priority_queues else (Priority.NORMAL,)

    def source(self, priority: Priority = Priority.NORMAL) -> str:
        return self.settings.queue_for(priority)

    def dlq(self, priority: Priority = Priority.NORMAL) -> str:
        return self.settings.dlq_for(priority)

    def sources(self) -> list[str]:
        return [self.source(p) for p in self.priorities()]

    def dlqs(self) -> list[str]:
        return [self.dlq(p) for p in self.priorities()]

    def source_of_dlq(self, dlq_url: str) -> str:
        """The source queue a dead-letter queue belongs to (redrive sends back there)."""
        for p in self.priorities():
            if self.dlq(p) == dlq_url:
                return self.source(p)
        return self.source()

    def url_of_arn(self, arn: str) -> str | None:
        name = arn.rsplit(":", 1)[-1]
        for url in (*self.sources(), *self.dlqs()):
            if queue_name(url) == name:
                return url
        return None

    # --- messages in hand ---------------------------------------------------

    def remember(self, handle: str, url: str) -> None:
        self._handles[handle] = url
        self._handles.move_to_end(handle)
        while len(self._handles) > MAX_HANDLES:
            self._handles.popitem(last=False)

    def remember_records(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Lambda's records: each handle's queue from its eventSourceARN."""
        for r in records:
            url = self.url_of_arn(str(r.get("eventSourceARN", "")))
            if url is not None and r.get("receiptHandle"):
                self.remember(str(r["receiptHandle"]), url)

    def forget(self, handles: Iterable[str]) -> None:
        for h in handles:
            self._handles.pop(h, None)

    def where(self, handle: str, default: str | None = None) -> str:
        """The queue a handle came from; ``default`` (the normal queue) when unknown."""
        return self._handles.get(handle) or default or self.source()

    def by_queue(self, handles: Iterable[str], default: str | None = None) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for h in handles:
            grouped.setdefault(self.where(h, default), []).append(h)
        return grouped
