"""Job states, mirrored by the PostgreSQL enum ``job_state`` (see sql/migrations)."""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    QUEUED = "queued"
    LEASED = "leased"
    RUNNING = "running"
    RETRYING = "retrying"
    STALLED = "stalled"
    WAITING = "waiting"  # a timer, a callback or child jobs: no worker, no lease
    SUCCEEDED = "succeeded"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.CANCELLED})
# dead_lettered is not terminal: a redrive brings the job back.
FINAL_FOR_NOW = frozenset({JobState.SUCCEEDED, JobState.CANCELLED, JobState.DEAD_LETTERED})


# How terminals show each state (rich markup colours), for the CLI and `tasklease dev`.
STYLE = {
    JobState.QUEUED: "cyan",
    JobState.LEASED: "blue",
    JobState.RUNNING: "bold blue",
    JobState.RETRYING: "yellow",
    JobState.STALLED: "magenta",
    JobState.WAITING: "bright_cyan",
    JobState.SUCCEEDED: "green",
    JobState.DEAD_LETTERED: "bold red",
    JobState.CANCELLED: "dim",
}


def styled(state: str) -> str:
    """The state as rich markup in its colour (states are our own names: nothing to escape)."""
    return f"[{STYLE.get(JobState(state), 'white')}]{state}[/]"
