"""The bodies of /v1/bulk: a bulk action asked for, and an operation's progress."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.services import filters
from app.store.bulk import BulkOperation


class BulkRequest(BaseModel):
    """Cancel, redrive or re-run every job the filter matches (or the jobs ``filter.ids``
    names)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["cancel", "redrive", "rerun"]
    filter: filters.JobFilter = Field(
        default_factory=lambda: filters.JobFilter.model_validate({}),
        description="which jobs (every field given must match); the action narrows its "
        "states: a cancel acts on unfinished jobs, a redrive on dead letters",
    )
    dry_run: bool = Field(False, description="only count the jobs it would act on")


class BulkPublic(BaseModel):
    """A bulk operation: what it does, to which jobs, and how far it got."""

    id: uuid.UUID
    action: str
    tenant: str | None
    filter: dict[str, Any]
    caller: str
    state: Literal["running", "done", "failed"]
    total: int = Field(description="jobs the filter matched when it started")
    done: int = Field(description="jobs acted on")
    skipped: int = Field(description="jobs that needed nothing (finished meanwhile)")
    failed: int = Field(description="jobs refused (a redrive past the job's redrive budget)")
    batches: int
    last_error: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, op: BulkOperation) -> BulkPublic:
        return cls.model_validate(op.to_dict())


class BulkStarted(BaseModel):
    """A dry run's count, or the operation started (poll GET /v1/bulk/{id})."""

    dry_run: bool
    total: int
    operation: BulkPublic | None
