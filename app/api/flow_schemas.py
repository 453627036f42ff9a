"""The API's shapes of flow control by key (docs/howto/flow-control.md): a kind's rate
per key, and where a keyed job stands on its key."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RatePublic(BaseModel):
    limit: int = Field(description="at most this many of a key's jobs start")
    per_seconds: float = Field(description="in any period of this many seconds")


class KeyStatus(BaseModel):
    """Where a keyed job stands on its key (docs/howto/flow-control.md)."""

    key: str
    concurrency: int | None = Field(description="its key's jobs at once (null: no limit)")
    rate: RatePublic | None = Field(description="its key's starts per period (null: no limit)")
    holding: int = Field(description="the key's other jobs holding it (claimed, not finished)")
    queued_ahead: int = Field(description="the key's jobs queued before this one")
    open: int = Field(description="the key's jobs not finished, this one included")
    waits_for_key: bool = Field(
        description="queued with its key's concurrency of jobs ahead of it: it starts when "
        "one of them ends"
    )
    waits_for_rate: bool = Field(description="queued with the key's starts in the period used up")
