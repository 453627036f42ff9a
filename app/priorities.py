"""Job priorities: three queues, and the weights the local event source polls them by.

A job's ``priority`` (``high``, ``normal``, ``low``; stored on its row) picks the queue its
messages go to; each queue has its own dead-letter queue. ``Route`` is what a send needs
to know of a job: which queue (its priority) and which fair-queue group (its tenant, sent
as the message's ``MessageGroupId``). ``Turns`` spreads polls over the queues by weight
(smooth weighted round-robin), so high-priority work is served first and low-priority
work still gets its share.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass


class Priority(enum.StrEnum):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


# Highest first: the order ties are broken in, and the order queues are listed in.
ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
DEFAULT_WEIGHTS = "high=6,normal=3,low=1"
MAX_WEIGHT = 1000


@dataclass(frozen=True, slots=True)
class Route:
    """Where a job's message goes: its priority's queue, in its tenant's message group."""

    job_id: uuid.UUID
    tenant: str
    priority: Priority = Priority.NORMAL

    @classmethod
    def of(cls, job_id: uuid.UUID, tenant: str, priority: str | None) -> Route:
        return cls(job_id, tenant, Priority(priority or Priority.NORMAL))


def parse_weights(text: str) -> dict[Priority, int]:
    """``"high=6,normal=3,low=1"`` as weights; every priority named once, each weight
    from 1 (a weight of 0 would starve its queue) to MAX_WEIGHT. ValueError says why."""
    weights: dict[Priority, int] = {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, value = part.partition("=")
        try:
            priority = Priority(name.strip())
        except ValueError:
            raise ValueError(
                f"{part!r}: give priority=weight for high, normal and low, e.g. {DEFAULT_WEIGHTS!r}"
            ) from None
        if not sep or not value.strip().isdigit():
            raise ValueError(f"{part!r}: the weight must be a whole number, e.g. {priority}=3")
        if priority in weights:
            raise ValueError(f"{priority} is named twice")
        weight = int(value)
        if not 1 <= weight <= MAX_WEIGHT:
            raise ValueError(
                f"{priority}={weight}: weights are from 1 to {MAX_WEIGHT} (0 would starve it)"
            )
        weights[priority] = weight
    missing = [p.value for p in ORDER if p not in weights]
    if missing:
        raise ValueError(f"no weight for {', '.join(missing)} (e.g. {DEFAULT_WEIGHTS!r})")
    return weights


class Turns:
    """Smooth weighted round-robin over the queues (nginx's): with weights 6/3/1, of every
    ten turns six start at high, three at normal and one at low, spread out rather than in
    runs. ``order()`` gives this turn's queue first, then the others by weight: the
    poller takes the first that has messages, so an empty queue costs its turn nothing."""

    def __init__(self, weights: Mapping[Priority, int]) -> None:
        self.weights = {p: weights[p] for p in ORDER if p in weights}
        self.total = sum(self.weights.values())
        self.current = dict.fromkeys(self.weights, 0)

    def next(self) -> Priority:
        for p, w in self.weights.items():
            self.current[p] += w
        # Highest current wins; ties go to the higher priority (ORDER).
        pick = max(self.weights, key=lambda p: self.current[p])
        self.current[pick] -= self.total
        return pick

    def order(self) -> list[Priority]:
        first = self.next()
        rest = sorted(
            (p for p in self.weights if p != first),
            key=lambda p: (-self.weights[p], ORDER.index(p)),
        )
        return [first, *rest]
